"""The controller's rollout decisions, tick by tick, from the gateways' counters as the test sets them (`fakes.py`;
`tests/integration/lifecycle` rolls out with the real gateway, `tests/integration/monitoring/test_fleet_rollouts.py`
from a real Prometheus over two): advance, wait, promote, roll back, windows summed over gateways, a restarted
gateway restarting only its own contribution, a rollout whose version was rejected at deployment."""

from __future__ import annotations

import numpy as np

from services.lifecycle import transitions
from services.lifecycle.routing import effective_weights
from tests.support.models import UNIT_HIDDEN
from tests.unit.lifecycle.fakes import GATEWAY
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
    assert (rollout.step, rollout.step_started) == (0, world.clock.now)
    assert rollout.baseline == {"gateways": {GATEWAY: {"versions": {}}}}
    world.metrics.serve("2", 30)
    world.metrics.serve("1", 30)
    assert world.tick(9.0).rollout.step == 0, "judged after the dwell only"
    rollout = world.tick(1.0).rollout
    assert rollout.step == 1 and rollout.baseline["gateways"][GATEWAY]["versions"]["2"]["requests"] == 30
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


def test_a_window_is_summed_over_every_gateway(world):
    start_rollout(world)
    world.metrics.serve("2", 500, gateway="gw-2")  # before the step: not in its window
    world.tick()
    world.metrics.serve("2", 15, errors=1)
    world.metrics.serve("2", 15, errors=1, gateway="gw-2")
    endpoint = world.tick(10.0)
    assert endpoint.rollout.status == "rolled_back", "2 errors in 30 requests over both gateways: 6.7% > 1%"
    assert "0.067" in endpoint.versions["2"].reason and world.registry.tags("m", "2")["rollout"] == "rejected"


def test_a_restarted_gateway_restarts_its_own_contribution_not_the_window(world):
    start_rollout(world)
    world.metrics.serve("2", 100)
    world.metrics.serve("2", 100, gateway="gw-2")
    world.tick()
    world.metrics.serve("2", 12)
    world.metrics.restart("gw-2")
    world.metrics.serve("2", 12, gateway="gw-2")  # counted since its restart
    rollout = world.tick(10.0).rollout
    assert (rollout.step, rollout.step_started) == (1, world.clock.now), "24 requests >= 20: judged, passed"


def test_a_baseline_marked_by_another_source_starts_a_fresh_window(world):
    start_rollout(world)
    world.tick()
    world.store.update(lambda s: transitions.start_rollout_step(s, "emb", 0, {"source": "prometheus"}, world.clock.now))
    world.metrics.serve("2", 30)
    rollout = world.tick(10.0).rollout
    assert (rollout.step, rollout.step_started) == (0, world.clock.now)
    assert rollout.baseline["gateways"][GATEWAY]["versions"]["2"]["requests"] == 30


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
