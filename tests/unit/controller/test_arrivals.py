"""New versions under auto-update's rollout policy, on the state alone (`transitions.mark_live`) and through the
controller at the traffic the docs describe: a version newer than all that serve is rolled out, not given all
traffic; without a policy it takes all, as the docs and `serving model list` say."""

from __future__ import annotations

from services.lifecycle import transitions
from services.lifecycle.deployments import RolloutPolicy
from services.lifecycle.routing import effective_weights
from services.lifecycle.shares import arrivals
from tests.unit.controller.world import run_traffic
from tests.unit.lifecycle.states import deployments
from tests.unit.lifecycle.test_transitions_controller import Manifestish

POLICY = RolloutPolicy(steps=[10, 50, 100], dwell=60)


def go_live(state, version: str) -> None:
    made = transitions.mark_live(state, "emb", version, model_dir="/m", lineage={}, manifest=Manifestish(32), now=1.0)
    assert made


def test_without_a_policy_a_new_version_takes_all_traffic_once_live():
    state = deployments(("1", "live"), ("2", "loading"), registered_name="m")
    go_live(state, "2")
    assert state.endpoints["emb"].rollout is None and effective_weights(state.endpoints["emb"]) == {"2": 1.0}
    assert arrivals(None).startswith("take all traffic once live (no rollout policy")
    assert arrivals(None, pinned=True).startswith("go live at 0% while the shares are pinned by version")


def test_with_a_policy_a_new_version_is_rolled_out_against_the_one_serving():
    state = deployments(("1", "live"), ("2", "loading"), registered_name="m")
    transitions.set_auto_update(state, "emb", "m", 2, POLICY)
    go_live(state, "2")
    rollout = state.endpoints["emb"].rollout
    assert (rollout.version, rollout.stable, rollout.steps, rollout.min_requests) == ("2", "1", [10, 50, 100], 200)
    assert effective_weights(state.endpoints["emb"]) == {"2": 0.1, "1": 0.9}


def test_the_first_version_and_an_older_one_deployed_again_are_not_rolled_out():
    state = deployments(("1", "loading"), registered_name="m")
    transitions.set_auto_update(state, "emb", "m", 2, POLICY)
    go_live(state, "1")
    assert state.endpoints["emb"].rollout is None, "nothing serves: nothing to compare with"
    state = deployments(("1", "loading"), ("2", "live"), registered_name="m", rollout_policy=POLICY)
    go_live(state, "1")
    assert state.endpoints["emb"].rollout is None and effective_weights(state.endpoints["emb"]) == {"2": 1.0}


def test_a_newer_arrival_replaces_a_rollout_under_way():
    state = deployments(("1", "live"), ("2", "loading"), ("3", "loading"), registered_name="m", rollout_policy=POLICY)
    go_live(state, "2")
    go_live(state, "3")
    rollout = state.endpoints["emb"].rollout
    assert (rollout.version, rollout.stable) == ("3", "1"), "1 had 90% of the traffic"
    assert effective_weights(state.endpoints["emb"]) == {"3": 0.1, "1": 0.9}


def test_a_pinned_endpoint_rolls_the_new_version_out_against_the_pinned_one():
    state = deployments(("1", "live"), ("2", "live"), ("3", "loading"), registered_name="m", rollout_policy=POLICY)
    transitions.canary(state, "emb", [1.0], ["1"])
    go_live(state, "3")
    assert state.endpoints["emb"].rollout.stable == "1" and state.endpoints["emb"].weights == {}


def test_a_second_training_run_is_rolled_out_and_promoted_at_the_docs_traffic(world):
    """`serving model auto-update sentiment --name sentiment --rollout`, then a second `serving train`."""
    world.register()
    world.tick()
    world.store.update(lambda s: transitions.set_auto_update(s, "emb", "m", 2, RolloutPolicy()))
    world.register()
    endpoint = world.tick()
    assert endpoint.versions["2"].state == "live" and effective_weights(endpoint) == {"2": 0.1, "1": 0.9}
    endpoint = run_traffic(world, rate=20, seconds=600, seed=6, tick=2)
    assert endpoint.rollout.status == "promoted" and effective_weights(endpoint) == {"2": 1.0}
    assert world.registry.champion == {"m": "2"}
