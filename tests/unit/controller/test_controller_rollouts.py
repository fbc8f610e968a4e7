"""The controller's rollout decisions, tick by tick, from the gateways' counters as the test sets them (`fakes.py`;
`tests/integration/lifecycle` rolls out with the real gateway, `tests/integration/monitoring/test_fleet_rollouts.py`
from a real Prometheus over two): advance, wait, promote, roll back, windows summed over gateways, a restarted
gateway restarting only its own contribution, a rollout whose version was rejected at deployment."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from services.common.errors import Unavailable
from services.lifecycle import transitions
from services.lifecycle.rollouts import transitions as rollout_transitions
from services.lifecycle.routing import effective_weights
from tests.support.models import UNIT_HIDDEN
from tests.unit.controller.fakes import GATEWAY
from tests.unit.controller.world import World, run_traffic

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
    world.metrics.serve("1", 24)
    rollout = world.tick(10.0).rollout
    assert (rollout.step, rollout.step_started) == (1, world.clock.now), "24 requests >= 20: judged, passed"


def test_a_baseline_marked_by_another_source_starts_a_fresh_window(world):
    start_rollout(world)
    world.tick()
    world.store.update(
        lambda s: rollout_transitions.start_rollout_step(s, "emb", 0, {"source": "prometheus"}, world.clock.now)
    )
    world.metrics.serve("2", 30)
    rollout = world.tick(10.0).rollout
    assert (rollout.step, rollout.step_started) == (0, world.clock.now)
    assert rollout.baseline["gateways"][GATEWAY]["versions"]["2"]["requests"] == 30


def test_a_step_started_later_than_now_starts_again_now(world):
    """Before: a state holding step_started far ahead of the clock held the rollout at its step for ever."""
    start_rollout(world)
    world.tick()
    ahead = world.clock.now + 10**6
    world.store.update(lambda s: rollout_transitions.start_rollout_step(s, "emb", 0, {"gateways": {}}, ahead))
    rollout = world.tick(1.0).rollout
    assert (rollout.step, rollout.step_started) == (0, world.clock.now)


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


DOCS_EXAMPLE = {"steps": [10, 50, 100], "dwell": 60.0, "max_error_rate": 0.01, "max_p99_ratio": 1.5}
"""`serving model rollout sentiment --version 2 --steps 10,50,100 --dwell 60 --max-error-rate 0.01 --max-p99-ratio
1.5` (docs/lifecycle.md), the other thresholds at their defaults."""


def start_docs_example(world: World) -> None:
    world.register()
    world.register()
    world.tick()
    world.store.update(lambda s: transitions.canary(s, "emb", [1.0], ["1"]))
    world.store.update(lambda s: transitions.start_rollout(s, "emb", "2", **DOCS_EXAMPLE))


def test_the_docs_example_at_the_docs_traffic_promotes_a_healthy_version(world):
    """20 req/s: the 10% step has its 200 requests on version 2 after about 100 s, the others within their dwell."""
    start_docs_example(world)
    endpoint = run_traffic(world, rate=20, seconds=600, seed=1, tick=2)
    assert endpoint.rollout.status == "promoted", endpoint.rollout.outcome
    assert world.clock.now - 1_000_000.0 < 300, "about 100 + 60 + 60 s"


def test_at_5_requests_a_second_the_first_step_waits_and_says_so_then_promotes(world):
    """The issue's traffic: 0.5 req/s on the new version at 10%, 200 requests after about 400 s."""
    start_docs_example(world)
    endpoint = run_traffic(world, rate=5, seconds=120, seed=2, tick=5)
    assert (endpoint.rollout.status, endpoint.rollout.step) == ("running", 0)
    assert endpoint.rollout.waiting.startswith("waiting for 200 requests on each version for the p99 comparison")
    endpoint = run_traffic(world, rate=5, seconds=900, seed=3, tick=5)
    assert endpoint.rollout.status == "promoted", endpoint.rollout.outcome
    assert endpoint.rollout.waiting is None


@pytest.mark.parametrize(("fails", "slower", "why"), [(0.05, 1.0, "error rate"), (0.0, 2.0, "p99 ratio")])
def test_the_docs_example_at_the_docs_traffic_rolls_back_a_failing_version(world, fails, slower, why):
    start_docs_example(world)
    endpoint = run_traffic(world, rate=20, seconds=600, seed=4, fails=fails, slower=slower)
    assert endpoint.rollout.status == "rolled_back" and f"at 10%: {why}" in endpoint.rollout.outcome
    assert endpoint.versions["2"].state == "rejected"


def test_a_step_short_of_requests_past_max_wait_rolls_back_unjudged(world):
    start_docs_example(world)
    endpoint = run_traffic(world, rate=1, seconds=700, seed=5, tick=10)
    assert endpoint.rollout.status == "rolled_back" and "not judged: after 660 s" in endpoint.rollout.outcome


def test_a_version_rolled_back_and_deployed_again_is_live_again_at_the_share_the_pin_leaves(world):
    start_rollout(world)
    world.tick()
    world.metrics.serve("2", 30, errors=10)
    world.metrics.serve("1", 30)
    world.tick(10.0)
    world.tick(3.0)
    assert world.states() == {"1": "live", "2": "rejected"} and world.serving() == {"1"}
    world.store.update(lambda s: transitions.redeploy(s, "emb", "2"))
    endpoint = world.tick()
    assert world.states() == {"1": "live", "2": "live"} and world.serving() == {"1", "2"}
    assert effective_weights(endpoint) == {"1": 1.0}, "the rollback's pin holds until traffic is handed back"


def test_a_rollout_whose_numbers_cannot_be_read_pauses_says_so_once_and_resumes_where_it_was(world, caplog):
    """Prometheus cut off while a step is judged: no promotion or rollback on numbers it cannot read."""
    caplog.set_level(logging.INFO, "controller")
    start_rollout(world)
    started = world.tick().rollout.step_started
    world.metrics.serve("2", 30, errors=10)  # numbers that would roll it back, once read
    world.metrics.serve("1", 30)
    read = world.metrics.read

    def cut_off(endpoint):
        raise Unavailable("Prometheus at http://127.0.0.4:9090 did not answer: timed out")

    world.metrics.read = cut_off
    for _ in range(3):
        rollout = world.tick(10.0).rollout
        assert (rollout.status, rollout.step, rollout.step_started) == ("running", 0, started)
    assert world.controller.rollouts.paused == {"emb"}
    said = [r.getMessage() for r in caplog.records if "paused at 50%" in r.getMessage()]
    assert len(said) == 1 and "neither promoting nor rolling back" in said[0] and "did not answer" in said[0]
    world.metrics.read = read
    endpoint = world.tick(1.0)
    assert endpoint.rollout.status == "rolled_back", "judged on the numbers once they can be read"
    assert world.controller.rollouts.paused == set()
    assert any("resumes at 50%" in r.getMessage() for r in caplog.records)
