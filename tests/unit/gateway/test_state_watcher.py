"""The gateway's watcher of the deployment state store: it rebuilds only when the revision moved, a state it cannot
serve leaves the last one serving and says why, and a store it cannot reach leaves the last state serving while
`/health/ready`'s `state_store` and `serving_state_store_up` show the outage, until the store answers again."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from prometheus_client import REGISTRY

from services.gateway.state_watcher import StoreWatcher
from services.lifecycle.state import Deployments, DeploymentStore, EndpointState
from tests.support.state import write_document


class Names:
    """An EndpointSet of the state's endpoint names (enough to tell which state a watcher serves)."""

    def __init__(self, state: Deployments):
        self.known = sorted(state.endpoints)
        self.errors: dict[str, str] = {}
        self.metrics: dict = {}

    def get(self, name):
        return name if name in self.known else None

    def names(self):
        return self.known

    def source_stamps(self):
        return ()

    def read_stamps(self):
        return ()

    def unload(self):
        return None


@pytest.fixture
def store(tmp_path) -> DeploymentStore:
    store = DeploymentStore.open(f"sqlite:///{tmp_path / 'lifecycle' / 'state.db'}")
    store.update(lambda s: s.endpoints.setdefault("a", EndpointState()))
    return store


def add(store: DeploymentStore, name: str) -> None:
    store.update(lambda s: s.endpoints.setdefault(name, EndpointState()))


def up() -> float | None:
    return REGISTRY.get_sample_value("serving_state_store_up", {"backend": "sqlite"})


def watch(store: DeploymentStore) -> tuple[StoreWatcher, list[int]]:
    builds: list[int] = []

    def build(state: Deployments) -> Names:
        builds.append(len(state.endpoints))
        return Names(state)

    return StoreWatcher(store, build, interval=0.1), builds


def test_it_rebuilds_when_the_revision_moved_and_only_then(store):
    watcher, builds = watch(store)
    assert watcher.names() == ["a"] and watcher.revision == 1 and watcher.health() == {"state_store": "ok"}
    assert asyncio.run(watcher.check()) is False and builds == [1], "same revision: nothing read, nothing built"
    add(store, "b")
    assert asyncio.run(watcher.check()) is True and watcher.names() == ["a", "b"] and watcher.revision == 2
    assert up() == 1.0


def test_a_state_it_cannot_serve_leaves_the_last_one_serving_and_is_said_once(store):
    watcher, builds = watch(store)
    write_document(store, '{"endpoints": {"a": {"versions": 3}}}')
    assert asyncio.run(watcher.check()) is False and asyncio.run(watcher.check()) is False
    assert watcher.names() == ["a"] and builds == [1]
    problem = watcher.errors()["deployment state"]
    assert "revision 2) is invalid" in problem and problem.endswith("(still serving the previous one)")
    assert "state.db" not in problem and watcher.health() == {"state_store": "ok"}
    write_document(store, '{"endpoints": {"c": {}}}')
    assert asyncio.run(watcher.check()) is True and watcher.names() == ["c"] and watcher.errors() == {}


def test_an_unreachable_store_leaves_the_last_state_serving_and_shows_the_outage_until_it_is_back(store, tmp_path):
    watcher, _ = watch(store)
    shutil.move(tmp_path / "lifecycle", tmp_path / "away")
    assert asyncio.run(watcher.check()) is False
    assert watcher.resolve("a") == "a", "the last state keeps serving"
    assert watcher.health() == {"state_store": "unreachable: unable to open database file"} and up() == 0.0
    shutil.move(tmp_path / "away", tmp_path / "lifecycle")
    add(store, "b")
    assert asyncio.run(watcher.check()) is True and watcher.names() == ["a", "b"]
    assert watcher.health() == {"state_store": "ok"} and up() == 1.0


def test_a_store_down_at_start_serves_nothing_yet_and_catches_up_once_it_answers(store, tmp_path):
    fresh = DeploymentStore.open(store.url)  # a worker starting: it has not reached the store yet
    shutil.move(tmp_path / "lifecycle", tmp_path / "away")
    watcher, _ = watch(fresh)
    assert watcher.names() == [] and watcher.health()["state_store"].startswith("unreachable: ")
    shutil.move(tmp_path / "away", tmp_path / "lifecycle")
    assert asyncio.run(watcher.check()) is True and watcher.names() == ["a"]
