"""A deployed version's manifest and tokenizer for a gateway (`services.gateway.version_files`): the controller's copy
in its models directory when this host can read it (found by the endpoint's name and the version, never at the state's
`model_dir`), else fetched once from the registry into the gateway's own cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from services.common.confined import OutsideBase
from services.common.contract import MANIFEST_FILE, TOKENIZER_FILE, checked_hashes, sha256_file
from services.common.errors import ConfigurationError
from services.gateway.version_files import version_files
from services.lifecycle.deployments import VersionState
from tests.support.models import unit_model_dir


class FilesFromDisk:
    """The registry's `fetch_files`, from a model directory on disk; counts the fetches."""

    def __init__(self, model_dir):
        self.model_dir, self.fetches = model_dir, []

    def fetch_files(self, name, version, dest, files):
        self.fetches.append((name, version))
        dest.mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copy2(self.model_dir / file, dest / file)
        return dest


@pytest.fixture
def registry(tmp_path) -> FilesFromDisk:
    return FilesFromDisk(unit_model_dir(tmp_path / "registered"))


def record(model_dir: str | None, checked: Path, name: str = "tiny-emb") -> VersionState:
    """A live version as the controller recorded it, having checked the copy in `checked`."""
    lineage = {"registry": {"name": name}, "artifacts": checked_hashes(checked)}
    return VersionState(version="3", state="live", model_dir=model_dir, lineage=lineage)


@pytest.fixture
def controllers(registry, tmp_path) -> Path:
    """The controller's models directory on this host, holding its copy of version 3 of endpoint `emb`."""
    shutil.copytree(registry.model_dir, tmp_path / "controller" / "emb" / "3" / "model")
    return tmp_path / "controller"


def test_the_controllers_copy_readable_here_is_used_as_it_is(registry, controllers, tmp_path):
    copy = controllers / "emb" / "3" / "model"
    found = version_files(
        "emb", record(str(copy), registry.model_dir), tmp_path / "cache", registry=registry, models_dir=controllers
    )
    assert found == copy and registry.fetches == []


def test_a_gateway_told_to_read_only_its_own_files_fetches_even_a_readable_copy(registry, controllers, tmp_path):
    copy = controllers / "emb" / "3" / "model"
    found = version_files("emb", record(str(copy), registry.model_dir), tmp_path / "cache", registry=registry)
    assert found == tmp_path / "cache" / "emb" / "3" and registry.fetches == [("tiny-emb", "3")]


def test_a_model_dir_the_state_names_outside_the_models_directory_is_never_read(registry, controllers, tmp_path):
    """A readable directory with a manifest and a tokenizer, named by the state: the gateway looks only where the
    controller's copy of this endpoint's version is, and fetches the checked files otherwise."""
    planted = unit_model_dir(tmp_path / "planted")
    shutil.rmtree(controllers / "emb")
    found = version_files(
        "emb", record(str(planted), registry.model_dir), tmp_path / "cache", registry=registry, models_dir=controllers
    )
    assert found == tmp_path / "cache" / "emb" / "3" and registry.fetches == [("tiny-emb", "3")]


@pytest.mark.parametrize("endpoint", ["..", "../../elsewhere", "a/b"])
def test_a_name_that_would_leave_the_cache_or_the_models_directory_is_refused(
    registry, controllers, tmp_path, endpoint
):
    checked = record(None, registry.model_dir)
    for models_dir in (controllers, None):
        with pytest.raises(OutsideBase):
            version_files(endpoint, checked, tmp_path / "cache", registry=registry, models_dir=models_dir)
    assert registry.fetches == [] and not (tmp_path / "elsewhere").exists()


def test_another_hosts_model_dir_is_fetched_once_from_the_registry_of_the_lineage(registry, tmp_path):
    elsewhere = record("/on/the/controllers/host/emb/3/model", registry.model_dir)
    found = version_files("emb", elsewhere, tmp_path / "cache", registered_name="other", registry=registry)
    assert found == tmp_path / "cache" / "emb" / "3"
    assert sorted(p.name for p in found.iterdir()) == [MANIFEST_FILE, TOKENIZER_FILE]
    assert version_files("emb", elsewhere, tmp_path / "cache", registry=registry) == found
    assert registry.fetches == [("tiny-emb", "3")]
    assert [p.name for p in (tmp_path / "cache" / "emb").iterdir()] == ["3"]  # no staging directory left


def test_a_tokenizer_that_is_not_the_manifests_is_refused_and_not_cached(registry, tmp_path):
    checked = record(None, registry.model_dir)
    (registry.model_dir / TOKENIZER_FILE).write_text('{"changed": true}')
    with pytest.raises(ConfigurationError, match="does not match its manifest's hash"):
        version_files("emb", checked, tmp_path / "cache", registry=registry)
    assert not (tmp_path / "cache" / "emb" / "3").exists()


def test_files_sealed_again_after_the_controllers_check_are_refused_and_not_cached(registry, tmp_path):
    """A tokenizer replaced in the registry with its manifest sealed again passes the manifest's own check, but is
    not the copy the controller checked (the hashes in the version's lineage)."""
    checked = record(None, registry.model_dir)
    (registry.model_dir / TOKENIZER_FILE).write_text('{"changed": true}')
    manifest = json.loads((registry.model_dir / MANIFEST_FILE).read_text())
    manifest["files"][TOKENIZER_FILE] = sha256_file(registry.model_dir / TOKENIZER_FILE)
    (registry.model_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ConfigurationError, match="is not the one the controller checked"):
        version_files("emb", checked, tmp_path / "cache", registry=registry)
    assert not (tmp_path / "cache" / "emb" / "3").exists()
    with pytest.raises(ConfigurationError, match="recorded no hashes"):
        version_files("emb", VersionState(version="3", state="live"), tmp_path / "cache", registry=registry)
