"""The controller and a deployment state it cannot use. A document it cannot read (empty, not JSON, the wrong schema):
said once, the last good state kept, neither Triton nor the state touched, the controller never dies, and carries on
once the state is readable again. A store it cannot reach: an outside failure like the registry's, said at each try
and tried again with exponential backoff, the last good state kept meanwhile. A store that lost its state (emptied and
made again empty by another process, or set back to an older revision): said once at ERROR, nothing written over it,
and the controller follows it again once restored."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sqlite3
from contextlib import closing

import pytest

from tests.support.state import stored, write_document
from tests.unit.controller.world import World

BROKEN = {
    "empty": "",
    "not JSON": '{"endpoints": {"emb": ',
    "wrong schema": '{"endpoints": []}',
    "a version in no known state": '{"endpoints": {"emb": {"versions": {"1": {"version": "1", "state": "exploded"}}}}}',
}


def tick(world: World, seconds: float = 0.0) -> None:
    """One controller tick, without reading the state back (`World.tick` would fail on the broken state)."""
    world.clock.advance(seconds)
    world.controller.tick()


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "controller"]


@pytest.mark.parametrize("content", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_state_is_reported_once_and_the_controller_carries_on_when_it_is_back(world, caplog, content):
    world.register()
    world.tick()
    world.tick()  # the last good state the controller read has version 1 live
    good = stored(world.store)[1]
    write_document(world.store, content)
    broken = stored(world.store)
    world.register()  # a new version the controller must not act on while it cannot read the state
    caplog.set_level(logging.INFO, logger="controller")
    for _ in range(3):
        tick(world, 1.0)
    assert len(warnings(caplog)) == 1, warnings(caplog)
    assert "is invalid" in warnings(caplog)[0] and world.store.url in warnings(caplog)[0]
    assert "keeping the last good state (1 endpoints)" in warnings(caplog)[0]
    assert world.serving() == {"1"} and world.triton.loads == 1, "Triton left as it was"
    assert stored(world.store) == broken, "the state left as it was"
    assert world.controller.last_good.endpoints["emb"].versions["1"].state == "live"
    write_document(world.store, good)
    assert world.tick(1.0).versions["2"].state == "live", "carries on from the restored state"
    assert any("readable again" in r.getMessage() for r in caplog.records)


def test_another_problem_is_reported_again(world, caplog):
    world.register()
    world.tick()
    caplog.set_level(logging.WARNING, logger="controller")
    write_document(world.store, "")
    tick(world)
    tick(world)
    write_document(world.store, "{")
    tick(world)
    assert len(warnings(caplog)) == 2


def test_a_first_start_on_a_new_store_is_no_problem(tmp_path, caplog):
    world = World(tmp_path)
    caplog.set_level(logging.WARNING, logger="controller")
    tick(world)
    assert warnings(caplog) == [] and list(world.controller.last_good.endpoints) == ["emb"]


def test_an_unreachable_store_is_retried_with_backoff_and_the_controller_carries_on_when_it_is_back(world, caplog):
    world.register()
    world.tick()
    world.tick()  # the last good state the controller read has version 1 live
    world.register()
    lifecycle = world.settings.run_dir / "lifecycle"
    shutil.move(lifecycle, lifecycle.with_name("away"))  # the store's file cannot be opened any more
    caplog.set_level(logging.INFO, logger="controller")
    for _ in range(7):  # 6 s: tries at 0, 2 and 6 s (backoff 2, then 4 s), none in between
        tick(world, 1.0)
    said = warnings(caplog)
    assert len(said) == 3, said
    assert all("unreachable: unable to open database file" in w for w in said)
    assert [w.rsplit("retrying in ", 1)[1] for w in said] == ["2s", "4s", "8s"]
    assert "keeping the last good state (1 endpoints)" in said[0]
    assert world.serving() == {"1"} and world.controller.last_good.endpoints["emb"].versions["1"].state == "live"
    shutil.move(lifecycle.with_name("away"), lifecycle)
    tick(world, 8.0)
    assert any("readable again" in r.getMessage() for r in caplog.records)
    assert world.tick(0.0).versions["2"].state == "live", "carries on once the store answers"


def test_the_loop_outlives_a_failing_tick(world, caplog):
    calls = []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in one tick")
        os.kill(os.getpid(), signal.SIGTERM)  # the loop's own handler: stop after this tick

    world.controller.tick = tick
    world.controller.settings.interval = 0.01
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        world.controller.run()
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    assert len(calls) == 2
    assert any("controller tick failed" in r.getMessage() and r.exc_info for r in caplog.records)


def raw(world: World) -> tuple:
    """The stored row as it is, read with SQLite itself."""
    with sqlite3.connect(world.settings.run_dir / "lifecycle" / "state.db") as conn:
        return conn.execute("SELECT revision, document FROM serving_deployment_state").fetchone()


def errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name == "controller"]


def recreate_empty(world: World) -> None:
    """The store's file emptied, then its tables made again at revision 0 by a process that started on it."""
    path = world.settings.run_dir / "lifecycle" / "state.db"
    path.write_bytes(b"")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE serving_deployment_state (id INTEGER PRIMARY KEY, revision INTEGER NOT NULL, "
            "document TEXT NOT NULL, epoch BIGINT NOT NULL DEFAULT 0)"
        )
        conn.execute("""INSERT INTO serving_deployment_state VALUES (1, 0, '{"endpoints":{}}', 0)""")


def set_back(world: World) -> None:
    """The state's revision set back to 1 (an old copy of the state put back by hand), its versions as then."""
    with sqlite3.connect(world.settings.run_dir / "lifecycle" / "state.db") as conn:
        conn.execute("UPDATE serving_deployment_state SET revision = 1")


@pytest.mark.parametrize("loss", [recreate_empty, set_back], ids=["emptied and recreated", "revision set back"])
def test_a_store_that_lost_its_state_is_not_written_over_and_said_once_at_error(world, caplog, tmp_path, loss):
    world.register()
    world.tick()
    world.tick()  # version 1 live, at revision 3 or more
    path = world.settings.run_dir / "lifecycle" / "state.db"
    with closing(sqlite3.connect(path)) as live, closing(sqlite3.connect(tmp_path / "good.db")) as copy:
        live.backup(copy)  # what `serving state backup` does
    loss(world)
    lost = raw(world)
    world.register()  # a new version the controller must not deploy into a state that is not the store's real one
    caplog.set_level(logging.INFO, logger="controller")
    for _ in range(3):
        tick(world, 1.0)
    assert raw(world) == lost, "nothing written over it (no compare-and-swap from the older revision)"
    assert world.serving() == {"1"} and world.triton.loads == 1, "Triton left as it was"
    assert len(errors(caplog)) == 1 and "lost its state" in errors(caplog)[0], errors(caplog)
    assert "`serving state restore FILE`" in errors(caplog)[0] and "acts on none" in errors(caplog)[0]
    assert not any("carrying on" in r.getMessage() for r in caplog.records)
    assert world.controller.last_good.endpoints["emb"].versions["1"].state == "live"
    from services.lifecycle.store.backup import restore

    restore(world.store, tmp_path / "good.db")
    assert world.tick(1.0).versions["2"].state == "live", "carries on from the restored state"
