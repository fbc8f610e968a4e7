"""Placing registry versions into a Triton model repository, for the wheel's Triton and for the NGC image."""

from services.common.contract import MANIFEST_FILE, MODEL_FILE
from services.triton.model_config import parse as parse_config
from services.triton.model_control import TritonModels
from services.triton.repository import RenderOptions
from tests.support.models import unit_model_dir


def test_local_placement_links_the_fetched_files_beside_the_python_encoder(tmp_path):
    model_dir = unit_model_dir(tmp_path / "fetched")
    models = TritonModels(tmp_path / "repo", "http://127.0.0.1:1", RenderOptions(target="local"), control_key="k")
    models.place("emb", "3", model_dir)
    version = tmp_path / "repo" / "emb" / "3"
    assert (version / "model.py").is_file()
    assert (version / MODEL_FILE).resolve() == (model_dir / MODEL_FILE).resolve()
    config = parse_config((tmp_path / "repo" / "emb" / "config.pbtxt").read_text())
    assert config.name == "emb" and config.backend == "python" and config.version_policy.HasField("all")


def test_container_placement_copies_the_onnx_file_for_the_native_backend(tmp_path):
    model_dir = unit_model_dir(tmp_path / "fetched")
    models = TritonModels(
        tmp_path / "repo", "http://127.0.0.1:1", RenderOptions(target="container", gpu=True), control_key="k"
    )
    models.place("emb", "4", model_dir)
    version = tmp_path / "repo" / "emb" / "4"
    assert sorted(p.name for p in version.iterdir()) == [MODEL_FILE]
    assert not (version / MODEL_FILE).is_symlink() and not (version / MANIFEST_FILE).exists()
    config = parse_config((tmp_path / "repo" / "emb" / "config.pbtxt").read_text())
    assert config.platform == "onnxruntime_onnx" and config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    models.remove("emb", "4")
    assert not models.placed("emb", "4")
