"""Placing registry versions into a Triton model repository, for the wheel's Triton and for the NGC image; names
that would lead out of the repository are refused before any file is touched."""

from pathlib import Path

import pytest

from services.common.confined import OutsideBase
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


def outside(tmp_path: Path) -> tuple[Path, str]:
    """A directory outside the repository holding `important/keep`, and a model name that reaches it from anywhere."""
    victim = tmp_path / "victim"
    (victim / "important").mkdir(parents=True)
    (victim / "important" / "keep").write_text("kept")
    return victim, "../" * 24 + str(victim.resolve()).lstrip("/")


@pytest.mark.parametrize("how", ["dot-dot path", "dot-dot", "link out of the repository"])
def test_a_model_or_version_name_that_leaves_the_repository_is_refused_before_any_file_is_touched(tmp_path, how):
    """The attack's last step: `remove(endpoint, version)` with names from a crafted state deleted
    `<repository>/<endpoint>/<version>` wherever that led (`shutil.rmtree` before Triton's refusal)."""
    victim, escaping = outside(tmp_path)
    models = TritonModels(tmp_path / "repo", "http://127.0.0.1:1", RenderOptions(target="local"), control_key="k")
    (tmp_path / "repo").mkdir()
    if how == "dot-dot path":
        model, version = escaping, "important"
    elif how == "dot-dot":
        model, version = "..", "victim"
    else:
        (tmp_path / "repo" / "linked").symlink_to(victim)
        model, version = "linked", "important"
    fetched = unit_model_dir(tmp_path / "fetched")
    for act in (
        lambda: models.remove(model, version),
        lambda: models.forget(model),
        lambda: models.place(model, version, fetched),
        lambda: models.placed(model, version),
        lambda: models.load(model),
    ):
        with pytest.raises(OutsideBase):
            act()
    assert (victim / "important" / "keep").read_text() == "kept"
    assert sorted(p.name for p in victim.iterdir()) == ["important"], "nothing placed there"
