import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from services.common.contract import MANIFEST_FILE, TOKENIZER_FILE, Manifest, Reference
from services.common.errors import ConfigurationError
from tests.support.models import unit_model_dir


def test_manifest_round_trips_and_names_the_contract(tmp_path):
    manifest = Manifest.load(unit_model_dir(tmp_path / "m"))
    assert manifest.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert manifest.output.numpy_dtype is np.float32 and manifest.output_dim == 32
    assert manifest.output.dims == [32], "Triton's dims leave out the batch axis"
    manifest.verify_files(tmp_path / "m")


def test_verify_files_detects_a_changed_artifact(tmp_path):
    model_dir = unit_model_dir(tmp_path / "m")
    manifest = Manifest.load(model_dir)
    tokenizer = json.loads((model_dir / TOKENIZER_FILE).read_text())
    tokenizer["added_tokens"] = []
    (model_dir / TOKENIZER_FILE).write_text(json.dumps(tokenizer))
    with pytest.raises(ConfigurationError, match="does not match its manifest hash"):
        manifest.verify_files(model_dir)


def test_verify_files_detects_a_missing_artifact(tmp_path):
    model_dir = unit_model_dir(tmp_path / "m")
    (model_dir / TOKENIZER_FILE).unlink()
    with pytest.raises(ConfigurationError, match="is missing"):
        Manifest.load(model_dir).verify_files(model_dir)


def test_missing_manifest_says_how_to_build_it(tmp_path):
    with pytest.raises(ConfigurationError, match="make model"):
        Manifest.load(tmp_path)
    assert not (tmp_path / MANIFEST_FILE).exists()


def test_reference_outputs_are_looked_up_by_text(tmp_path):
    Reference(texts=["a", "b"], outputs=[[1.0, 0.0], [0.0, 1.0]]).save(tmp_path)
    reference = Reference.load(tmp_path)
    assert reference.output_of("b").tolist() == [0.0, 1.0]
    with pytest.raises(ValueError):
        reference.output_of("not recorded")


def test_endpoint_names_are_the_models_own():
    manifest = Manifest.load(unit_model_dir(Path(tempfile.mkdtemp()) / "m"))
    assert manifest.endpoint_name == "unit-embedding"
    assert manifest.model_copy(update={"name": "all-MiniLM-L6-v2"}).endpoint_name == "minilm"
    assert manifest.model_copy(update={"name": "My Model/v2"}).endpoint_name == "my-model-v2"
