"""A manifest from the registry is untrusted: every name is held to an allow-list when it is loaded, the refusal
names the field (never the value), and nothing in it becomes configuration text."""

import json
import os

import pytest

from services.common.contract import MANIFEST_FILE, MODEL_FILE, Manifest, TensorSpec
from services.common.errors import ConfigurationError
from services.triton import model_config
from services.triton.repository import RenderOptions, render
from tests.support.models import unit_model_dir

INJECTION = (
    'embedding" data_type: TYPE_FP32 dims: [ 32 ] } ] default_model_filename: "../../evil.py" output [ { name: "x'
)
HOSTILE_TENSOR_NAMES = [
    INJECTION,
    "embedding\ndefault_model_filename: 'evil.py'",
    "embedding # a comment",
    "emb{}",
    "emb'",
    "e" * 5000,
    "",
    "1starts-with-a-digit",
]


def _edited(tmp_path, change) -> dict:
    model_dir = unit_model_dir(tmp_path / "m")
    document = json.loads((model_dir / MANIFEST_FILE).read_text())
    change(document)
    (model_dir / MANIFEST_FILE).write_text(json.dumps(document))
    return model_dir


@pytest.mark.parametrize("name", HOSTILE_TENSOR_NAMES, ids=range(len(HOSTILE_TENSOR_NAMES)))
@pytest.mark.parametrize("where", ["inputs", "outputs"])
def test_a_hostile_tensor_name_is_refused_naming_the_field(tmp_path, name, where):
    model_dir = _edited(tmp_path, lambda d: d[where][0].update(name=name))
    with pytest.raises(ConfigurationError, match=rf"{where}\.0\.name: .*must match") as refused:
        Manifest.load(model_dir)
    assert "evil" not in str(refused.value) and len(str(refused.value)) < 400, "the value is never echoed"


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("name", 'x" backend: "evil', "name"),
        ("name", "a/../../b", "name"),
        ("version", "1/../../2", "version"),
        ("max_seq_length", 10**9, "max_seq_length"),
        ("pooling", "mean\nbackend: x", "pooling"),
        ("schema_version", 2, "schema_version"),
        ("default_model_filename", "evil.py", "default_model_filename"),
        ("backend", "python", "backend"),
    ],
)
def test_other_hostile_fields_are_refused(tmp_path, field, value, named):
    model_dir = _edited(tmp_path, lambda d: d.__setitem__(field, value))
    with pytest.raises(ConfigurationError, match=rf"{named}"):
        Manifest.load(model_dir)


@pytest.mark.parametrize(
    "path", ["../../../etc/passwd", "/etc/hostname", "a/../../b", ".hidden", "a//b", "dir/", MANIFEST_FILE]
)
def test_a_file_entry_outside_the_artifact_is_refused_before_anything_is_read(tmp_path, path):
    model_dir = _edited(tmp_path, lambda d: d["files"].update({path: "0" * 64}))
    with pytest.raises(ConfigurationError, match=r"files: ") as refused:
        Manifest.load(model_dir)
    assert "/etc" not in str(refused.value)


def test_the_files_a_server_runs_must_be_sealed(tmp_path):
    model_dir = _edited(tmp_path, lambda d: d["files"].pop(MODEL_FILE))
    with pytest.raises(ConfigurationError, match=r"no hash for \['model.onnx'\]"):
        Manifest.load(model_dir).verify_files(model_dir)


def test_an_artifact_file_that_is_a_link_is_refused_with_a_relative_name(tmp_path):
    model_dir = unit_model_dir(tmp_path / "m")
    (model_dir / MODEL_FILE).rename(tmp_path / "elsewhere.onnx")
    os.symlink(tmp_path / "elsewhere.onnx", model_dir / MODEL_FILE)
    with pytest.raises(
        ConfigurationError, match="artifact file model.onnx is missing or not a regular file"
    ) as refused:
        Manifest.load(model_dir).verify_files(model_dir)
    assert str(tmp_path) not in str(refused.value), "no absolute path in a reason"


def test_an_oversized_manifest_is_refused_before_parsing(tmp_path):
    model_dir = _edited(tmp_path, lambda d: d.__setitem__("labels", ["x" * 200] * 6000))
    with pytest.raises(ConfigurationError, match="over 1048576 bytes"):
        Manifest.load(model_dir)


def test_configuration_is_built_as_data_so_a_name_can_never_become_configuration(tmp_path):
    """Even a name that skipped validation is a quoted string in config.pbtxt, parsed back unchanged."""
    spec = TensorSpec.model_construct(name=INJECTION, dtype="FP32", shape=[-1, 32])
    config = model_config.encoder(
        name="emb",
        native=False,
        max_batch_size=8,
        inputs=[spec],
        outputs=[spec],
        ragged=False,
        instances=1,
        gpu=False,
        parameters={},
    )
    parsed = model_config.parse(model_config.to_text(config))
    assert parsed.input[0].name == INJECTION and parsed.default_model_filename == ""
    assert parsed.backend == "python" and len(parsed.input) == 1 and len(parsed.output) == 1


def test_a_rendered_repository_takes_no_path_from_the_manifest(tmp_path):
    repository = render(unit_model_dir(tmp_path / "m"), tmp_path / "repo", RenderOptions(target="container"))
    encoder = model_config.parse((repository / "encoder" / "config.pbtxt").read_text())
    assert encoder.default_model_filename == MODEL_FILE and encoder.platform == "onnxruntime_onnx"
