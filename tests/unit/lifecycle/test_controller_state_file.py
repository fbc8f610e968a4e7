"""The controller and a broken deployment state file: whatever the file holds (empty, not JSON, the wrong schema,
deleted), the controller says so once, keeps its last good state, touches neither Triton nor the file, never dies,
and carries on once the file is back."""

from __future__ import annotations

import logging
import os
import signal

import pytest

from tests.unit.lifecycle.world import World

BROKEN = {
    "empty": "",
    "not JSON": '{"endpoints": {"emb": ',
    "wrong schema": '{"endpoints": []}',
    "a version in no known state": '{"endpoints": {"emb": {"versions": {"1": {"version": "1", "state": "exploded"}}}}}',
    "deleted": None,
}


def tick(world: World, seconds: float = 0.0) -> None:
    """One controller tick, without reading the state back (`World.tick` would fail on the broken file)."""
    world.clock.advance(seconds)
    world.controller.tick()


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "controller"]


@pytest.mark.parametrize("content", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_state_file_is_reported_once_and_the_controller_carries_on_when_it_is_back(world, caplog, content):
    world.register()
    world.tick()
    world.tick()  # the last good state the controller read has version 1 live
    good = world.store.path.read_text()
    if content is None:
        world.store.path.unlink()
    else:
        world.store.path.write_text(content)
    world.register()  # a new version the controller must not act on while it cannot read the state
    caplog.set_level(logging.INFO, logger="controller")
    for _ in range(3):
        tick(world, 1.0)
    assert len(warnings(caplog)) == 1, warnings(caplog)
    assert (
        str(world.store.path) in warnings(caplog)[0]
        and "keeping the last good state (1 endpoints)" in warnings(caplog)[0]
    )
    assert world.serving() == {"1"} and world.triton.loads == 1, "Triton left as it was"
    assert (world.store.path.read_text() if world.store.path.exists() else None) == content, "the file left as it was"
    assert world.controller.last_good.endpoints["emb"].versions["1"].state == "live"
    world.store.path.write_text(good)
    assert world.tick(1.0).versions["2"].state == "live", "carries on from the restored file"
    assert any("readable again" in r.getMessage() for r in caplog.records)


def test_another_problem_is_reported_again(world, caplog):
    world.register()
    world.tick()
    caplog.set_level(logging.WARNING, logger="controller")
    world.store.path.write_text("")
    tick(world)
    tick(world)
    world.store.path.write_text("{")
    tick(world)
    assert len(warnings(caplog)) == 2


def test_a_first_start_without_a_state_file_is_no_problem(tmp_path, caplog):
    world = World(tmp_path)
    world.store.path.unlink()
    caplog.set_level(logging.WARNING, logger="controller")
    tick(world)
    assert warnings(caplog) == [] and world.controller.last_good.endpoints == {}


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
