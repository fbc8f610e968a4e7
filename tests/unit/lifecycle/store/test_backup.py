"""`serving state backup|restore|accept` over a real SQLite store: a backup is a consistent copy taken while writers
write; a restore puts an older revision back so that a process that saw a later one takes it (a new restore epoch),
over a store that lost its state or one that did not; a file that is no backup is refused with the store untouched.

Backup and restore move the state's row, not database files: a backup holds that row in the store's own schema and
nothing else; a restore reads the row alone, so a trigger, a view or a table of a crafted backup never reaches the
live store (the live file ends up exactly as this project makes a store); a backup made by the previous code (a
copy of the whole store file) is restored; a state that breaks a rule is refused by restore and accept, naming the
field."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import closing

import pytest
from typer.testing import CliRunner

from services.cli import app
from services.common.errors import ConfigurationError
from services.lifecycle.deployments import EndpointState
from services.lifecycle.store import DeploymentStore, StateStoreUnavailable
from services.lifecycle.store.backup import accept, backup, inspect_backup, restore
from services.lifecycle.store.db import open_engine, parse_url
from services.lifecycle.store.memory import StateMemory
from tests.support.state import escaping, stored, write_document


@pytest.fixture
def path(tmp_path):
    return tmp_path / "run" / "lifecycle" / "state.db"


@pytest.fixture
def store(path) -> DeploymentStore:
    store = DeploymentStore.open(f"sqlite:///{path}")
    yield store
    store.close()


def grow(store: DeploymentStore, until: int) -> None:
    """Add endpoints `e<revision>` until the store is at revision `until`."""
    while store.revision() < until:
        store.update(lambda s: s.endpoints.setdefault(f"e{store.revision() + 1}", EndpointState()))


def process_memory_only(url: str) -> DeploymentStore:
    """A store as a process on another host sees it: what it saw is in its own memory only."""
    parsed = parse_url(url)
    return DeploymentStore(parsed, open_engine(parsed), StateMemory(None))


def test_a_backup_is_a_consistent_copy_taken_while_writers_write(store, tmp_path):
    grow(store, 5)
    stop = threading.Event()

    def write():
        while not stop.is_set():
            store.update(lambda s: s.endpoints.setdefault(f"w{store.revision()}", EndpointState()))

    writer = threading.Thread(target=write)
    writer.start()
    copies = []
    try:
        for n in range(5):
            copies.append(backup(store, tmp_path / f"b{n}.db"))
            deadline = time.monotonic() + 30
            while store.revision() == copies[-1].stamp.revision:  # the writer has written since (a busy machine)
                assert time.monotonic() < deadline, "the writer wrote nothing in 30 s"
                time.sleep(0.01)
    finally:
        stop.set()
        writer.join()
    revisions = [copy.stamp.revision for copy in copies]
    print(f"\n5 backups under a writer: revisions {revisions}")
    assert revisions == sorted(set(revisions)) and revisions[0] >= 5, "each a later whole state"
    for n, copy in enumerate(copies):
        again = inspect_backup(tmp_path / f"b{n}.db")
        assert again == copy and copy.endpoints == copy.stamp.revision, "one endpoint a revision: a whole state"
        assert not (tmp_path / f"b{n}.db-wal").exists(), "one file"


def test_a_restore_of_revision_9_is_taken_by_a_process_that_saw_revision_12(store, path, tmp_path):
    grow(store, 9)
    backup(store, tmp_path / "at9.db")
    grow(store, 12)
    gateway = process_memory_only(store.url)
    assert gateway.revision() == 12
    path.write_bytes(b"")  # the store loses its state
    with pytest.raises(StateStoreUnavailable, match="lost its state"):
        gateway.read()
    summary, replaced = restore(store, tmp_path / "at9.db", now_ms=1_000)
    assert replaced == "an empty file" and summary.stamp == (1_000, 9) and summary.endpoints == 9
    assert sorted(gateway.read().endpoints) == sorted(f"e{n}" for n in range(1, 10)), "taken: its epoch is newer"
    assert gateway.stamp() == (1_000, 9)
    gateway.update(lambda s: s.endpoints.setdefault("after", EndpointState()))
    assert store.stamp() == (1_000, 10), "changes go on from the restored revision, in its epoch"
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


@pytest.mark.parametrize("damage", ["garbage", "deleted", "older revision", "intact"])
def test_a_restore_replaces_whatever_the_store_holds(store, path, tmp_path, damage):
    grow(store, 2)
    backup(store, tmp_path / "at2.db")
    grow(store, 4)
    store.report_replica("triton-a", {"e1": ["1"]}, now=1.0)
    if damage == "garbage":
        path.write_bytes(b"x" * 5000)
    elif damage == "deleted":
        path.unlink()
    elif damage == "older revision":
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE serving_deployment_state SET revision = 1")
    summary, _ = restore(store, tmp_path / "at2.db", now_ms=5)
    fresh = DeploymentStore.open(store.url)
    assert fresh.stamp() == summary.stamp == (5, 2) and sorted(fresh.read().endpoints) == ["e1", "e2"]
    assert fresh.replicas(now=1.0, ttl=10) == {}, "replicas report again: a backup does not know what they hold"


def test_a_second_restore_of_the_same_backup_is_newer_than_the_first(store, tmp_path):
    grow(store, 3)
    backup(store, tmp_path / "at3.db")
    first, _ = restore(store, tmp_path / "at3.db", now_ms=100)
    grow(store, 6)
    second, _ = restore(store, tmp_path / "at3.db", now_ms=50)  # the clock went back meanwhile
    assert first.stamp == (100, 3) and second.stamp == (101, 3) and store.stamp() == (101, 3)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "is not a file"),
        (b"", "is not a SQLite database"),
        (b"id,revision\n1,3\n", "is not a SQLite database"),
        ("no row", "holds no deployment state"),
        ("invalid", "is not a valid deployment state"),
        ("other database", "not a usable backup: no such table"),
    ],
)
def test_a_file_that_is_no_backup_is_refused_and_the_store_left_as_it_is(store, tmp_path, content, says):
    grow(store, 2)
    source = tmp_path / "given.db"
    if isinstance(content, bytes):
        source.write_bytes(content)
    elif content is not None:
        backup(store, source)
        with sqlite3.connect(source) as conn:
            if content == "no row":
                conn.execute("DELETE FROM serving_deployment_state")
            elif content == "invalid":
                conn.execute("UPDATE serving_deployment_state SET document = '{\"endpoints\": []}'")
            else:
                conn.execute("DROP TABLE serving_deployment_state")
    before = store.stamp(), store.read()
    with pytest.raises(ConfigurationError, match=says):
        restore(store, source)
    assert (store.stamp(), store.read()) == before


def test_accept_makes_every_process_take_an_older_state_put_back_by_hand(store, path):
    grow(store, 5)
    gateway = process_memory_only(store.url)
    gateway.read()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE serving_deployment_state SET revision = 2")
    with pytest.raises(StateStoreUnavailable, match="older than revision 5"):
        gateway.read()
    assert accept(store, now_ms=7).stamp == (7, 2)
    assert gateway.stamp() == (7, 2) and len(gateway.read().endpoints) == 5


def serving(*argv: str, env: dict) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env=env)
    return result.exit_code, result.output


def test_the_commands_use_the_stacks_store_and_say_what_they_did(tmp_path, path, store):
    env = {"SERVING_RUN_DIR": str(tmp_path / "run"), "SERVING_STATE_URL": ""}
    grow(store, 3)
    code, said = serving("state", "backup", str(tmp_path / "b.db"), env=env)
    assert code == 0 and said.startswith("backed up revision 3 (3 endpoints) of sqlite:///") and "b.db" in said
    code, said = serving("state", "backup", str(tmp_path / "b.db"), env=env)
    assert code == 2 and "exists; pass --force" in said
    code, said = serving("state", "backup", str(tmp_path / "missing" / "b.db"), env=env)
    assert code == 2 and "missing is no directory; make it first" in said, said
    path.write_bytes(b"")
    code, said = serving("state", "backup", str(tmp_path / "c.db"), env=env)
    assert code == 2 and "the store's file is empty (0 bytes)" in said and not (tmp_path / "c.db").exists()
    code, said = serving("state", "accept", env=env)
    assert code == 2 and "has no state to accept; restore a backup instead" in said
    code, said = serving("state", "restore", str(tmp_path / "b.db"), env=env)
    assert code == 0 and "restored revision 3 of restore epoch" in said and "it replaced an empty file" in said
    assert len(store.read().endpoints) == 3


@pytest.fixture
def umask_022():
    """The CLI as users run it: a umask that lets others read what is created (the stack's processes run at 077)."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_the_commands_write_files_and_directories_only_their_owner_may_read(tmp_path, store, umask_022):
    """Before: a backup was 0644, and a restore into a new run directory made it 0755 and the store 0644."""
    grow(store, 2)
    code, said = serving("state", "backup", str(tmp_path / "b.db"), env={"SERVING_STATE_URL": store.url})
    assert code == 0, said
    new_run = tmp_path / "new" / "run"
    env = {"SERVING_RUN_DIR": str(new_run), "SERVING_STATE_URL": ""}
    code, said = serving("state", "restore", str(tmp_path / "b.db"), env=env)
    assert code == 0, said
    made = [tmp_path / "b.db", *sorted(new_run.rglob("*")), new_run, tmp_path / "new"]
    modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in made}
    assert all(mode in ("0o600", "0o700") for mode in modes.values()), modes
    assert modes["b.db"] == "0o600" and modes["new/run/lifecycle/state.db"] == "0o600"


def test_a_postgresql_store_is_backed_up_and_restored_by_its_row_too(tmp_path):
    """The commands reach a PostgreSQL store as they reach SQLite (tests/integration/lifecycle has the real server):
    one that does not answer is said, without its password; a restore checks its file before the store."""
    env = {"SERVING_STATE_URL": "postgresql+psycopg2://serving:secret@127.0.0.1:1/serving"}
    code, said = serving("state", "backup", str(tmp_path / "x.db"), env=env)
    assert code == 2 and "postgresql+psycopg2://serving:***@127.0.0.1:1/serving is unreachable" in said
    code, said = serving("state", "restore", str(tmp_path / "x.db"), env=env)
    assert code == 2 and "x.db is not a file" in said
    assert "secret" not in said


def schema(path) -> list[tuple]:
    """Every object of a SQLite database file: (type, name, sql)."""
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def rows(path, table: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(f"SELECT * FROM {table}").fetchall()


def fresh_schema(tmp_path) -> list[tuple]:
    """What this project makes a store with."""
    new = DeploymentStore.open(f"sqlite:///{tmp_path / 'fresh' / 'state.db'}")
    new.revision()
    new.close()
    return schema(tmp_path / "fresh" / "state.db")


EVIL_ENDPOINT = json.dumps({"registered_name": "attackers-model", "max_versions": 1})
TRIGGER = (
    "CREATE TRIGGER evil AFTER UPDATE ON serving_deployment_state BEGIN UPDATE serving_deployment_state "
    f"SET document = json_set(document, '$.endpoints.evil', json('{EVIL_ENDPOINT}')) WHERE id = 1; END"
)
"""What a crafted backup carries: on every change of the state, the attacker's endpoint (bound to the attacker's
registered model) is added back."""


def test_a_backup_holds_the_state_row_alone_in_the_stores_own_schema(store, path, tmp_path):
    grow(store, 3)
    store.report_replica("triton-a", {"e1": ["1"]}, now=1.0)
    with sqlite3.connect(path) as conn:  # whatever else the live file holds stays out of a backup
        conn.execute("CREATE TABLE notes (text TEXT)")
    summary = backup(store, tmp_path / "b.db")
    assert schema(tmp_path / "b.db") == fresh_schema(tmp_path)
    assert rows(tmp_path / "b.db", "serving_replica_reports") == []
    [(row_id, revision, document, epoch)] = rows(tmp_path / "b.db", "serving_deployment_state")
    assert (row_id, epoch, revision) == (1, 0, 3) and summary.stamp == (0, 3)
    assert sorted(json.loads(document)["endpoints"]) == ["e1", "e2", "e3"]


def test_a_trigger_in_a_backup_never_reaches_the_live_store(store, path, tmp_path):
    """The attack: a backup with an AFTER UPDATE trigger. Restored by copying the file, the trigger stayed in the
    live store and added the attacker's endpoint back at the next change (and went into every later backup)."""
    grow(store, 2)
    crafted = tmp_path / "crafted.db"
    backup(store, crafted)
    with sqlite3.connect(crafted) as conn:
        conn.execute(TRIGGER)
        conn.execute("CREATE TABLE loot (secret TEXT)")
        conn.execute("CREATE VIEW serving_view AS SELECT * FROM serving_deployment_state")
    restore(store, crafted, now_ms=10)
    assert schema(path) == fresh_schema(tmp_path), "the live store holds only what this project makes a store with"
    store.update(lambda s: s.endpoints.setdefault("mine", EndpointState()))  # the next admin change
    assert sorted(store.read().endpoints) == ["e1", "e2", "mine"], "the change stays as written"
    assert "evil" not in stored(store)[1]
    backup(store, tmp_path / "later.db", overwrite=True)
    assert not [entry for entry in schema(tmp_path / "later.db") if entry[0] in ("trigger", "view")]


def test_a_restore_leaves_no_trigger_the_live_file_had(store, path, tmp_path):
    """A trigger already in the live file (a restore by the previous code) is gone after a restore: the live file's
    pages are replaced whole by a store made here."""
    grow(store, 2)
    backup(store, tmp_path / "good.db")
    with sqlite3.connect(path) as conn:
        conn.execute(TRIGGER)
    restore(store, tmp_path / "good.db", now_ms=10)
    assert schema(path) == fresh_schema(tmp_path)
    store.update(lambda s: s.endpoints.setdefault("mine", EndpointState()))
    assert sorted(store.read().endpoints) == ["e1", "e2", "mine"]


def test_a_state_table_that_is_a_view_or_lacks_its_columns_is_no_backup(store, tmp_path):
    grow(store, 1)
    before = store.stamp()
    for name, ddl in {
        "view.db": "CREATE VIEW serving_deployment_state AS SELECT 1 AS id, 5 AS revision, '{}' AS document",
        "columns.db": "CREATE TABLE serving_deployment_state (id INTEGER, state TEXT)",
    }.items():
        with sqlite3.connect(tmp_path / name) as conn:
            conn.execute(ddl)
        with pytest.raises(
            ConfigurationError, match="is not a usable backup: serving_deployment_state (is a view|lacks)"
        ):
            restore(store, tmp_path / name)
    assert store.stamp() == before


@pytest.mark.parametrize("epoch", [True, False], ids=["with epochs", "before epochs"])
def test_a_backup_made_by_the_previous_code_is_restored(store, path, tmp_path, epoch):
    """The previous `serving state backup` copied the whole store file (SQLite's online backup); older stores had
    no epoch column."""
    grow(store, 4)
    old = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as live, closing(sqlite3.connect(old)) as copy:
        live.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")
        if not epoch:
            copy.execute("ALTER TABLE serving_deployment_state DROP COLUMN epoch")
    grow(store, 6)
    summary, replaced = restore(store, old, now_ms=20)
    assert summary.stamp == (20, 4) and summary.endpoints == 4 and replaced == "the store's previous state"
    assert sorted(store.read().endpoints) == ["e1", "e2", "e3", "e4"]
    assert schema(path) == fresh_schema(tmp_path)


def test_restore_and_accept_refuse_a_state_that_breaks_a_rule_and_say_which_field(store, path, tmp_path):
    """The first attack: a backup (or a state put back by hand) whose endpoint leaves every base directory."""
    env = {"SERVING_RUN_DIR": str(tmp_path / "run"), "SERVING_STATE_URL": ""}
    grow(store, 2)
    crafted = tmp_path / "crafted.db"
    backup(store, crafted)
    with sqlite3.connect(crafted) as conn:
        conn.execute("UPDATE serving_deployment_state SET document = ?", (escaping(tmp_path / "victim"),))
    before = store.stamp(), store.read()
    code, said = serving("state", "restore", str(crafted), env=env)
    assert code == 2 and "crafted.db is not a valid deployment state: endpoints.../../../" in said
    assert "[key]: endpoint name" in said and "versions.important.[key]: version 'important'" in said
    assert (store.stamp(), store.read()) == before
    write_document(store, escaping(tmp_path / "victim"))  # or written straight into the store, then accepted
    code, said = serving("state", "accept", env=env)
    assert code == 2 and "is not a valid deployment state; nothing accepted: endpoints.../../../" in said
    assert store.stamp().epoch == 0
