"""`serving state backup|restore` on a real PostgreSQL store (`tests/support/postgres.py`): they move the state's row as
on SQLite. A backup is the same SQLite file of one row; a restore writes that row into the store's tables (created
again where they were dropped) at a new epoch, taken by a process that saw a later revision; nothing else of a backup
(a trigger) reaches the database, and a state that breaks a rule is refused, naming the field."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from services.common.errors import ConfigurationError
from services.lifecycle.deployments import EndpointState
from services.lifecycle.store import DeploymentStore
from services.lifecycle.store.backup import backup, restore
from services.lifecycle.store.db import open_engine, parse_url
from services.lifecycle.store.memory import StateMemory
from tests.support.state import escaping


@pytest.fixture(scope="module")
def url(postgres) -> str:
    return postgres.create_database("state_backup_tests")


def grow(store: DeploymentStore, *names: str) -> None:
    for name in names:
        store.update(lambda s, name=name: s.endpoints.setdefault(name, EndpointState()))


def a_process(url: str) -> DeploymentStore:
    """The store as another process sees it: what it saw is in its own memory."""
    parsed = parse_url(url)
    return DeploymentStore(parsed, open_engine(parsed), StateMemory(None))


def triggers(store: DeploymentStore) -> list[str]:
    with store.engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'serving_deployment_state'::regclass AND NOT tgisinternal"
        )
        return [row[0] for row in found]


def test_a_row_backed_up_from_postgresql_is_restored_into_its_dropped_tables(url, tmp_path):
    store = a_process(url)
    grow(store, "a", "b", "c")
    summary = backup(store, tmp_path / "at3.db")
    with closing(sqlite3.connect(tmp_path / "at3.db")) as conn:
        assert conn.execute("SELECT epoch, revision FROM serving_deployment_state").fetchall() == [(0, 3)]
    grow(store, "d", "e")
    store.report_replica("triton-a", {"a": ["1"]}, now=1.0)
    seen = a_process(url)
    assert seen.revision() == 5
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE serving_deployment_state, serving_replica_reports")
    restored, replaced = restore(store, tmp_path / "at3.db", now_ms=1_000)
    assert summary.stamp == (0, 3) and restored.stamp == (1_000, 3) and replaced == "a store without its tables"
    assert sorted(seen.read().endpoints) == ["a", "b", "c"] and seen.stamp() == (1_000, 3), "taken: a newer epoch"
    assert seen.replicas(now=1.0, ttl=10) == {}


def test_a_crafted_backup_brings_no_trigger_and_no_state_that_breaks_a_rule(url, tmp_path):
    store = a_process(url)
    grow(store, "mine")
    crafted = tmp_path / "crafted.db"
    backup(store, crafted)
    with sqlite3.connect(crafted) as conn:
        conn.execute(
            "CREATE TRIGGER evil AFTER UPDATE ON serving_deployment_state BEGIN UPDATE serving_deployment_state "
            """SET document = json_set(document, '$.endpoints.evil', json('{}')) WHERE id = 1; END"""
        )
    restore(store, crafted)
    grow(store, "after")
    assert triggers(store) == [] and "evil" not in store.read().endpoints
    with sqlite3.connect(crafted) as conn:
        conn.execute("UPDATE serving_deployment_state SET document = ?", (escaping(tmp_path / "victim"),))
    before = store.stamp(), store.read()
    with pytest.raises(ConfigurationError, match=r"is not a valid deployment state: endpoints\.\.\./\.\./"):
        restore(store, crafted)
    assert (store.stamp(), store.read()) == before
