import json

import numpy as np
import pytest

from services.common.contract import Manifest
from services.common.errors import ConfigurationError


def test_manifest_describes_the_exported_model(tiny_model):
    manifest = Manifest.load(tiny_model)
    assert manifest.task == "embedding"
    assert manifest.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(spec.dtype == "INT64" and spec.shape == [-1, -1] for spec in manifest.inputs)
    assert manifest.output.name == "embedding" and manifest.output.shape == [-1, 32]
    assert manifest.output.numpy_dtype is np.float32
    assert set(manifest.files) == {"model.onnx", "tokenizer.json"}
    assert manifest.source.files, "the checkpoint's files are recorded for lineage"
    manifest.verify_files(tiny_model)


def test_verify_files_detects_a_changed_artifact(tiny_model, tmp_path):
    for name in ("model.onnx", "tokenizer.json", "manifest.json"):
        (tmp_path / name).write_bytes((tiny_model / name).read_bytes())
    manifest = Manifest.load(tmp_path)
    tokenizer = json.loads((tmp_path / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = []
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(ConfigurationError, match="does not match its manifest hash"):
        manifest.verify_files(tmp_path)


def test_missing_manifest_says_how_to_build_it(tmp_path):
    with pytest.raises(ConfigurationError, match="make model"):
        Manifest.load(tmp_path)
