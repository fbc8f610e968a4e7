"""A PostgreSQL state store that answers but holds the state's tables locked (a DDL, a `LOCK TABLE`, an operator's
open transaction), on a real server (`tests/support/postgres.py`): each read fails within the statement timeout as
`StateStoreUnavailable` (the admin API's 503 with Retry-After, the controller's "store away"), not after the lock is
released, and not as the connection pool's own TimeoutError (a 500) when more callers than its connections wait."""

from __future__ import annotations

import threading
import time

import psycopg2
import pytest

from services.lifecycle import transitions
from services.lifecycle.store import DeploymentStore, StateStoreUnavailable
from services.lifecycle.store import db as store_db
from tests.support.postgres import HOST, USER


def test_reads_of_a_locked_store_fail_as_unreachable_within_the_statement_timeout(postgres, monkeypatch):
    monkeypatch.setattr(store_db, "STATEMENT_TIMEOUT", 1.0)
    monkeypatch.setattr(store_db, "POOL_TIMEOUT", 1.5)
    store = DeploymentStore.open(postgres.create_database("locked"))
    store.read()  # the tables made
    locker = psycopg2.connect(host=HOST, port=postgres.port, user=USER, dbname="locked")
    try:
        locker.cursor().execute("LOCK TABLE serving_deployment_state IN ACCESS EXCLUSIVE MODE")  # held until rollback
        outcomes: list[tuple[str, float]] = []

        def read() -> None:
            started = time.monotonic()
            try:
                store.read()
                outcomes.append(("read", time.monotonic() - started))
            except Exception as error:
                outcomes.append((type(error).__name__, time.monotonic() - started))

        readers = [threading.Thread(target=read, daemon=True) for _ in range(8)]  # more than the pool's 6 connections
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 45
        for reader in readers:
            reader.join(timeout=max(0.0, deadline - time.monotonic()))
        assert len(outcomes) == 8, f"reads still held after 45 s: {outcomes}"
        assert {kind for kind, _ in outcomes} == {StateStoreUnavailable.__name__}, outcomes
        assert max(took for _, took in outcomes) < 30, outcomes
    finally:
        locker.rollback()
        locker.close()
    assert store.read() is not None, "the store reads again once the lock is gone"
    store.close()


def test_a_pool_that_has_no_free_connection_is_unreachable():
    from sqlalchemy import exc

    with pytest.raises(StateStoreUnavailable, match="no free connection within"), store_db.reachable("x"):
        raise exc.TimeoutError("QueuePool limit of size 2 overflow 4 reached")


def test_a_writer_cut_off_between_its_update_and_its_commit_holds_no_other_writer_for_long(postgres, monkeypatch):
    """The session of a process cut off mid-transaction (its COMMIT, and its close, never arrive) is ended by the
    server's idle-in-transaction timeout, and its row lock with it; without it, until the server's keepalives notice."""
    monkeypatch.setattr(store_db, "STATEMENT_TIMEOUT", 8.0)
    monkeypatch.setattr(store_db, "IDLE_IN_TRANSACTION_TIMEOUT", 1.0)
    url = postgres.create_database("cut_writer")
    cut, other = DeploymentStore.open(url), DeploymentStore.open(url)
    other.update(lambda state: transitions.set_auto_update(state, "emb", "emb", 2))  # the document row made
    held = cut.engine.connect()
    held.begin()
    held.execute(
        store_db.DOCUMENT.update().where(store_db.DOCUMENT.c.id == 1).values(revision=store_db.DOCUMENT.c.revision)
    )
    started = time.monotonic()
    other.update(lambda state: transitions.set_auto_update(state, "emb", "emb", 3))  # waits on the row lock
    took = time.monotonic() - started
    assert other.read().endpoints["emb"].max_versions == 3
    held.invalidate()
    cut.close()
    other.close()
    print(f"\na write waited {took:.1f}s on a session left in its transaction (idle-in-transaction timeout 1 s)")
    assert 0.8 <= took < 5.0, (
        f"waited {took:.1f}s: 1 s expected (no lock held below that; its statement's timeout above)"
    )
