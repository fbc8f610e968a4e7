"""The gateway's watcher of the deployment state store: it rebuilds only when the revision moved, a state it cannot
serve leaves the last one serving and says why, and a store it cannot reach leaves the last state serving while
`/health/ready`'s `state_store` and `serving_state_store_up` show the outage, until the store answers again. A store
that lost its state (emptied) or holds an older revision is not applied: the last state serves, `state_store` says
what happened and what to do, `serving_state_store_regressed` is 1 and the log says it at ERROR; a worker restarted
against it serves its host's last good state; a restored backup is followed again. A state that breaks a rule is not
applied either, and a worker that starts against one serves its host's last good state too."""

from __future__ import annotations

import asyncio
import logging
import shutil
import sqlite3

import pytest
from prometheus_client import REGISTRY

from services.gateway.state_source import StoreWatcher
from services.lifecycle.deployments import Deployments, EndpointState
from services.lifecycle.store import DeploymentStore
from tests.support.state import escaping, write_document


class Names:
    """A snapshot (`Endpoints`) of the state's endpoint names (enough to tell which state a watcher serves)."""

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
    assert watcher.names() == ["a"], "the last state keeps serving"
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


def regressed() -> float | None:
    return REGISTRY.get_sample_value("serving_state_store_regressed", {"backend": "sqlite"})


def lost_errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "lost its state" in r.getMessage()]


def test_an_emptied_store_is_not_applied_and_the_last_state_serves_on_saying_so(store, tmp_path, caplog):
    watcher, builds = watch(store)
    add(store, "b")
    asyncio.run(watcher.check())
    (tmp_path / "lifecycle" / "state.db").write_bytes(b"")
    for _ in range(3):
        assert asyncio.run(watcher.check()) is False
    assert watcher.names() == ["a", "b"] and builds == [1, 2], "nothing applied: the last state serves"
    health = watcher.health()["state_store"]
    assert health.startswith("lost: the store was read before, now its tables are gone"), health
    assert health.endswith("restore a backup with `serving state restore FILE`") and "state.db" not in health
    assert regressed() == 1.0 and up() == 1.0, "the store answers; its state is what is gone"
    assert len(lost_errors(caplog)) == 1 and "serving revision 2" in lost_errors(caplog)[0], "said once, at ERROR"


def test_an_older_revision_is_not_applied(store, tmp_path):
    watcher, builds = watch(store)
    add(store, "b")
    add(store, "c")
    asyncio.run(watcher.check())
    with sqlite3.connect(tmp_path / "lifecycle" / "state.db") as conn:
        conn.execute("""UPDATE serving_deployment_state SET revision = 1, document = '{"endpoints": {"a": {}}}'""")
    assert asyncio.run(watcher.check()) is False and watcher.names() == ["a", "b", "c"] and builds == [1, 3]
    assert "older than revision 3" in watcher.health()["state_store"] and regressed() == 1.0


def test_a_worker_restarted_against_an_emptied_store_serves_the_last_good_state_of_its_host(store, tmp_path):
    watch(store)
    add(store, "b")
    DeploymentStore.open(store.url).read()  # another worker read revision 2: the host's last good state
    (tmp_path / "lifecycle" / "state.db").write_bytes(b"")
    restarted, _ = watch(DeploymentStore.open(store.url))  # a new worker process: nothing in its own memory
    assert restarted.names() == ["a", "b"], "not an empty state: no endpoint dropped"
    assert restarted.health()["state_store"].startswith("lost: the store's file is empty (0 bytes)")
    assert (tmp_path / "lifecycle" / "state.db").stat().st_size == 0, "no tables created in it"


def test_a_restored_backup_of_an_older_revision_is_followed_again(store, tmp_path):
    from services.lifecycle.store.backup import backup, restore

    backup(store, tmp_path / "at1.db")
    watcher, _ = watch(store)
    add(store, "b")
    asyncio.run(watcher.check())
    (tmp_path / "lifecycle" / "state.db").write_bytes(b"")
    asyncio.run(watcher.check())
    assert watcher.health()["state_store"].startswith("lost: ")
    restore(store, tmp_path / "at1.db")
    assert asyncio.run(watcher.check()) is True and watcher.names() == ["a"], "revision 1, restored, is taken"
    assert watcher.health() == {"state_store": "ok"} and regressed() == 0.0


def test_a_worker_started_against_a_state_that_breaks_a_rule_serves_its_hosts_last_good_one_and_says_why(
    store, tmp_path, caplog
):
    """A state written straight into the store (or restored by an older `serving state restore`) whose endpoint
    leads out of every directory: not applied, said once in the log, in /health/ready and in the metric; a worker
    that starts meanwhile serves the last good state of its host; the next valid state is followed."""
    watch(store)
    add(store, "b")
    DeploymentStore.open(store.url).read()  # another worker read revision 2: the host's last good state
    write_document(store, escaping(tmp_path / "victim"))
    with caplog.at_level(logging.WARNING, logger="services.gateway"):
        restarted, _ = watch(DeploymentStore.open(store.url))  # a new worker process: nothing in its own memory
        assert asyncio.run(restarted.check()) is False and asyncio.run(restarted.check()) is False
    assert restarted.names() == ["a", "b"], "not an empty state: no endpoint dropped"
    problem = restarted.errors()["deployment state"]
    assert problem.startswith("the deployment state (revision 3) is invalid: endpoints.../../") and "[key]: " in problem
    assert problem.endswith("(still serving the previous one)") and restarted.health() == {"state_store": "ok"}
    assert REGISTRY.get_sample_value("serving_config_errors", {"file": "deployment state"}) == 1.0
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "revision 3 not applied, still serving the previous one" in errors[0]
    write_document(store, '{"endpoints": {"c": {}}}')
    assert asyncio.run(restarted.check()) is True and restarted.names() == ["c"] and restarted.errors() == {}
    assert REGISTRY.get_sample_value("serving_config_errors", {"file": "deployment state"}) == 0.0
