"""The deployment state file: locked read-modify-write, atomic replace, a change that raises writes nothing."""

import json
import threading

import pytest

from services.common.errors import ConfigurationError
from services.lifecycle.state import DeploymentStore, EndpointState, VersionState


def test_updates_from_many_threads_are_not_lost(tmp_path):
    store = DeploymentStore(tmp_path / "deployments.json")

    def add(i: int) -> None:
        store.update(lambda s: s.endpoints.setdefault(f"e{i}", EndpointState()))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store.read().endpoints) == 20


def test_a_change_that_raises_leaves_the_file_as_it_was(tmp_path):
    store = DeploymentStore(tmp_path / "deployments.json")
    store.update(lambda s: s.endpoints.setdefault("e", EndpointState(versions={"1": VersionState(version="1")})))
    before = store.path.read_text()

    def broken(state):
        state.endpoints.clear()
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        store.update(broken)
    assert store.path.read_text() == before
    assert json.loads(before)["endpoints"]["e"]["versions"]["1"]["state"] == "loading"


def test_a_corrupt_file_is_a_configuration_error(tmp_path):
    (tmp_path / "deployments.json").write_text("{ nope")
    with pytest.raises(ConfigurationError, match="deployments.json"):
        DeploymentStore(tmp_path / "deployments.json").read()
