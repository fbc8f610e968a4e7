"""A store that lost its state is not an empty state, over a real SQLite file: a process (running, or restarted) that
finds the file emptied, replaced by something else, deleted, or holding an older revision than it saw refuses it,
writes nothing over it and creates no tables in it; the first start of a run directory still creates the store, and
a store made before restore epochs existed is taken as it is."""

from __future__ import annotations

import multiprocessing
import sqlite3

import pytest

from services.lifecycle.deployments import EndpointState
from services.lifecycle.store import DeploymentStore, StateStoreUnavailable

RESTORE = "restore a backup with `serving state restore FILE`"


@pytest.fixture
def path(tmp_path):
    return tmp_path / "lifecycle" / "state.db"


@pytest.fixture
def used(path) -> DeploymentStore:
    """A store that served a while: three endpoints, revision 3."""
    store = DeploymentStore.open(f"sqlite:///{path}")
    for name in ("a", "b", "c"):
        store.update(lambda s, name=name: s.endpoints.setdefault(name, EndpointState()))
    yield store
    store.close()


def restarted(path) -> DeploymentStore:
    """The store as a process that starts now sees it (nothing in its own memory)."""
    return DeploymentStore.open(f"sqlite:///{path}")


def raw(path) -> tuple:
    """The stored row as it is, read with SQLite itself."""
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT revision, document FROM serving_deployment_state").fetchone()


def refused(action, says: str) -> str:
    with pytest.raises(StateStoreUnavailable) as raised:
        action()
    message = raised.value.message
    assert "lost its state" in message and says in message, message
    return message


def test_a_restarted_process_refuses_an_emptied_file_and_creates_no_tables_in_it(used, path):
    path.write_bytes(b"")
    store = restarted(path)
    message = refused(store.read, "the store's file is empty (0 bytes)")
    assert message.endswith(RESTORE)
    refused(lambda: store.update(lambda s: s.endpoints.setdefault("new", EndpointState())), "empty (0 bytes)")
    refused(lambda: store.report_replica("triton-a", {}, now=1.0), "empty (0 bytes)")
    assert path.stat().st_size == 0, "nothing written into it"


def test_a_file_that_is_no_database_any_more_is_refused_and_left_as_it_is(used, path):
    path.write_bytes(b"not a database " * 1000)
    for store in (used, restarted(path)):
        refused(store.read, "not a SQLite database")
    assert path.read_bytes() == b"not a database " * 1000


def test_a_deleted_file_is_not_created_again_on_a_host_that_saw_it(used, path):
    path.unlink()
    store = restarted(path)
    message = refused(store.read, "the store's file is gone, and this host last saw revision 3 of it")
    assert message.endswith(RESTORE) and not path.exists()


def test_a_running_process_whose_file_was_emptied_refuses_it_and_recreates_nothing(used, path):
    path.write_bytes(b"")
    refused(used.read, "its tables are gone")
    refused(lambda: used.update(lambda s: s.endpoints.clear()), "its tables are gone")
    assert path.stat().st_size == 0


def test_an_older_revision_is_refused_and_not_written_over(used, path):
    """Revision 3 seen; the store now holds revision 1 (an old copy put back, a revision set back by hand)."""
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE serving_deployment_state SET revision = 1, document = '{\"endpoints\": {}}'")
    before = raw(path)
    for store in (used, restarted(path)):
        refused(store.read, "the store holds revision 1, older than revision 3 this host saw")
        message = refused(store.revision, "older than revision 3")
        assert "`serving state accept`" in message, "the state is there: an operator may take it as it is"
        refused(lambda store=store: store.update(lambda s: s.endpoints.setdefault("x", EndpointState())), "older")
    assert raw(path) == before, "nothing written over it"


def test_a_restarted_process_remembers_the_last_good_state_of_its_host(used, path):
    path.write_bytes(b"")
    stamp, state = restarted(path).remembered()
    assert (stamp.epoch, stamp.revision) == (0, 3) and sorted(state.endpoints) == ["a", "b", "c"]


def first_start(url: str, name: str) -> None:
    store = DeploymentStore.open(url)
    store.update(lambda s: s.endpoints.setdefault(name, EndpointState()))
    store.close()


def test_the_first_start_of_a_run_directory_creates_one_store_whatever_starts_at_once(tmp_path, path):
    """Six processes (a gateway's workers, the controller, the agent) start at once on a fresh run directory: the
    store is made whole beside its place and linked in, so none ever finds an empty file, and none loses a change."""
    url = f"sqlite:///{path}"
    forked = multiprocessing.get_context("fork")
    processes = [forked.Process(target=first_start, args=(url, f"p{n}")) for n in range(6)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert [p.exitcode for p in processes] == [0] * 6
    store = restarted(path)
    assert sorted(store.read().endpoints) == [f"p{n}" for n in range(6)] and store.revision() == 6
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert sorted(p.name for p in path.parent.iterdir() if ".new" in p.name) == [], "no half-made file left"


def test_a_store_made_before_restore_epochs_is_taken_as_it_is(path):
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:  # the tables as the previous release made them
        conn.execute(
            "CREATE TABLE serving_deployment_state (id INTEGER PRIMARY KEY, revision INTEGER NOT NULL, "
            "document TEXT NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE serving_replica_reports (replica VARCHAR(255) PRIMARY KEY, ready TEXT NOT NULL, "
            "reported_at FLOAT NOT NULL)"
        )
        conn.execute('INSERT INTO serving_deployment_state VALUES (1, 4, \'{"endpoints": {"old": {}}}\')')
    store = restarted(path)
    assert list(store.read().endpoints) == ["old"] and store.revision() == 4
    store.update(lambda s: s.endpoints.setdefault("new", EndpointState()))
    assert store.revision() == 5
