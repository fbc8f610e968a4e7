"""The controller's rollout decisions, tick by tick, from the gateway's counters as the test sets them (`fakes.py`;
`tests/integration/lifecycle` rolls out with the real gateway): advance, wait, promote, roll back, a fresh window
after the gateway restarts, a rollout whose version was rejected at deployment."""

from __future__ import annotations

import numpy as np

from services.lifecycle import transitions
from services.lifecycle.routing import effective_weights
from tests.support.models import UNIT_HIDDEN
from tests.unit.lifecycle.world import World

POLICY = {"steps": [50, 100], "dwell": 10.0, "max_error_rate": 0.01, "max_p99_ratio": 5.0, "min_requests": 20}


def start_rollout(world: World) -> None:
    """Versions 1 and 2 live, all traffic on 1, a rollout of 2 started."""
    world.register()
    world.register()
    world.tick()
    world.store.update(lambda s: transitions.canary(s, "emb", [1.0], ["1"]))
    world.store.update(lambda s: transitions.start_rollout(s, "emb", "2", **POLICY))


def test_a_rollout_advances_step_by_step_then_promotes(world):
    start_rollout(world)
    rollout = world.tick().rollout
    assert (rollout.step, rollout.step_started) == (0, world.clock.now) and rollout.baseline == {"versions": {}}
    world.metrics.serve("2", 30)
    world.metrics.serve("1", 30)
    assert world.tick(9.0).rollout.step == 0, "judged after the dwell only"
    rollout = world.tick(1.0).rollout
    assert rollout.step == 1 and rollout.baseline["versions"]["2"]["requests"] == 30
    world.metrics.serve("2", 30)
    world.metrics.serve("1", 30)
    endpoint = world.tick(10.0)
    assert endpoint.rollout.status == "promoted" and endpoint.weights == {"2": 1.0}
    assert world.registry.champion == {"m": "2"} and world.registry.tags("m", "2") == {"rollout": "promoted"}


def test_a_step_with_too_few_requests_waits(world):
    start_rollout(world)
    world.tick()
    world.metrics.serve("2", 5)
    rollout = world.tick(30.0).rollout
    assert (rollout.status, rollout.step) == ("running", 0)


def test_a_failing_step_rolls_back_tags_the_version_and_unloads_it(world):
    start_rollout(world)
    world.tick()
    world.metrics.serve("2", 30, errors=10)
    world.metrics.serve("1", 30)
    endpoint = world.tick(10.0)
    assert endpoint.rollout.status == "rolled_back" and endpoint.weights == {"1": 1.0}
    assert endpoint.versions["2"].state == "rejected" and "error rate" in endpoint.versions["2"].reason
    tags = world.registry.tags("m", "2")
    assert tags["rollout"] == "rejected" and "new_error_rate" in tags["rollout.numbers"]
    world.tick(3.0)
    assert world.states() == {"1": "live", "2": "rejected"} and world.serving() == {"1"}
    assert world.registry.champion == {}


def test_counters_that_went_back_start_a_fresh_window(world):
    start_rollout(world)
    world.metrics.serve("2", 100)
    world.tick()
    world.metrics.counters.clear()  # the gateway restarted
    world.metrics.serve("2", 30)
    rollout = world.tick(10.0).rollout
    assert (rollout.step, rollout.step_started) == (0, world.clock.now)
    assert rollout.baseline["versions"]["2"]["requests"] == 30


def test_a_rollout_of_a_version_rejected_at_deployment_ends_without_moving_traffic(world):
    world.register()
    world.tick()
    world.forward_answer = np.full((2, UNIT_HIDDEN), np.inf, np.float32)
    world.register()
    world.store.update(lambda s: transitions.add_discovered(s, "emb", world.registry.versions("m")))
    world.store.update(lambda s: transitions.canary(s, "emb", [1.0], ["1"]))
    world.store.update(lambda s: transitions.start_rollout(s, "emb", "2", **POLICY))  # "2" still loading
    endpoint = world.tick()
    assert endpoint.versions["2"].state == "rejected"
    assert (endpoint.rollout.status, endpoint.rollout.outcome) == (
        "rolled_back",
        "version 2 was rejected at deployment",
    )
    assert effective_weights(endpoint) == {"1": 1.0} and world.metrics.reads == 0
