"""The rules the controller applies to the deployment state, on their own: what it finds (new versions, versions to
drain or unload) and what it records (live, rejected, drained, each rollout step and its end)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.contract import TensorSpec
from services.lifecycle import transitions
from services.lifecycle.deployments import RolloutStatus, VersionState
from services.lifecycle.rollouts import transitions as rollout_transitions
from tests.unit.lifecycle.states import deployments, rolling


@dataclass
class Tagged:
    version: str
    tags: dict[str, str] = field(default_factory=dict)


class Manifestish:
    """What `mark_live` reads of a manifest: its tensor contract."""

    def __init__(self, width: int):
        self.inputs = [TensorSpec(name="input_ids", dtype="INT64", shape=[-1, -1])]
        self.outputs = [TensorSpec(name="embedding", dtype="FP32", shape=[-1, width])]


# --- what the controller finds --------------------------------------------------------------------------------------
def test_discovery_takes_the_newest_new_versions_that_are_not_rejected():
    state = deployments(("2", "live"), registered_name="m", max_versions=2)
    found = [
        Tagged("1"),
        Tagged("2"),
        Tagged("3"),
        Tagged("4", {"deployment": "rejected"}),
        Tagged("6", {"rollout": "rejected"}),  # rolled back elsewhere: a deployment may still be tried
        Tagged("7"),
    ]
    assert transitions.discoverable(state.endpoints["emb"], found) == ["6", "7"]
    assert transitions.add_discovered(state, "emb", found) == ["6", "7"]
    states = {v: r.state for v, r in state.endpoints["emb"].versions.items()}
    assert states == {"2": "live", "6": "loading", "7": "loading"}
    assert transitions.discoverable(state.endpoints["emb"], found) == []
    assert transitions.add_discovered(state, "emb", found) == []


def test_a_removed_version_is_never_deployed_again_by_auto_update_but_a_newer_one_is():
    state = deployments(("1", "live"), ("2", "live"), registered_name="m", max_versions=2)
    transitions.remove(state, "emb", "2", now=100.0)
    assert transitions.finish_drained(state, "emb", ["2"]) == ["2"]  # drained, unloaded, forgotten
    registry = [Tagged("1"), Tagged("2")]
    assert transitions.discoverable(state.endpoints["emb"], registry) == [], "the user's removal stands"
    assert transitions.discoverable(state.endpoints["emb"], [*registry, Tagged("3")]) == ["3"]


def test_marking_live_records_the_version_and_the_first_one_fixes_the_contract():
    state = deployments(("1", "loading"), ("2", "loading"))
    transitions.mark_live(
        state, "emb", "1", model_dir="/m/1", lineage={"run": {"id": "r1"}}, manifest=Manifestish(32), now=0.0
    )
    record, endpoint = state.endpoints["emb"].versions["1"], state.endpoints["emb"]
    assert (record.state, record.model_dir, record.deployed_at) == ("live", "/m/1", "1970-01-01T00:00:00Z")
    assert record.lineage == {"run": {"id": "r1"}} and endpoint.contract_outputs[0].shape == [-1, 32]
    transitions.mark_live(state, "emb", "2", model_dir="/m/2", lineage={}, manifest=Manifestish(64), now=60.0)
    assert endpoint.contract_outputs[0].shape == [-1, 32], "the contract stays the first version's"
    assert endpoint.versions["2"].deployed_at == "1970-01-01T00:01:00Z"


def test_a_version_removed_while_it_was_deployed_never_goes_live():
    state = deployments(("1", "live"), ("2", "loading"), registered_name="m")
    transitions.remove(state, "emb", "2", now=10.0)
    made_live = transitions.mark_live(state, "emb", "2", model_dir="/m/2", lineage={}, manifest=Manifestish(32), now=20)
    assert made_live is False and state.endpoints["emb"].versions["2"].state == "draining"
    assert state.endpoints["emb"].live() == ["1"]
    transitions.finish_drained(state, "emb", ["2"])
    assert (
        transitions.mark_live(state, "emb", "2", model_dir="/m/2", lineage={}, manifest=Manifestish(32), now=30)
        is False
    )
    transitions.reject(state, "emb", "2", "checked after it was forgotten")  # no KeyError: nothing to mark


def test_following_another_registered_model_forgets_the_removals_of_the_first():
    state = deployments(("1", "live"), ("2", "live"), registered_name="m")
    transitions.remove(state, "emb", "2", now=10.0)
    transitions.set_auto_update(state, "emb", "m", 2)
    assert state.endpoints["emb"].removed == ["2"], "the same model again: the removal stands"
    transitions.set_auto_update(state, "emb", "other", 2)
    assert state.endpoints["emb"].removed == []


def test_a_rejected_version_keeps_its_reason_and_is_not_draining():
    state = deployments(("1", "loading"))
    state.endpoints["emb"].versions["1"].drain_started = 5.0
    transitions.reject(state, "emb", "1", "tensor contract differs")
    record = state.endpoints["emb"].versions["1"]
    assert (record.state, record.reason, record.drain_started) == ("rejected", "tensor contract differs", None)


def test_versions_beyond_the_newest_max_versions_drain_unless_a_split_or_a_rollout_uses_them():
    state = deployments(("1", "live"), ("2", "live"), ("3", "live"), ("4", "loading"), max_versions=1)
    assert transitions.to_retire(state.endpoints["emb"]) == ["2", "1"]
    state.endpoints["emb"].weights = {"1": 1.0}
    assert transitions.to_retire(state.endpoints["emb"]) == ["2"]
    assert transitions.prune(state, "emb", now=7.0) == ["2"]
    assert state.endpoints["emb"].versions["2"].state == "draining"
    assert state.endpoints["emb"].versions["2"].drain_started == 7.0
    assert transitions.prune(state, "emb", now=8.0) == []


def test_a_running_rollout_keeps_both_its_versions_and_a_finished_one_does_not():
    state = rolling(max_versions=1)
    state.endpoints["emb"].versions["3"] = VersionState(version="3", state="live")
    assert transitions.to_retire(state.endpoints["emb"]) == []
    state.endpoints["emb"].rollout.status = RolloutStatus.ROLLED_BACK
    assert transitions.to_retire(state.endpoints["emb"]) == ["2", "1"]


def test_draining_and_rolled_back_versions_are_due_for_unload_after_the_drain_time():
    state = deployments(("1", "draining"), ("2", "rejected"), ("3", "rejected"), ("4", "live"), ("5", "draining"))
    versions = state.endpoints["emb"].versions
    versions["1"].drain_started, versions["2"].drain_started, versions["4"].drain_started = 10.0, 10.0, 10.0
    versions["5"].drain_started = 12.0  # "3": rejected at deployment, never in traffic, no drain time
    assert transitions.due_for_unload(state.endpoints["emb"], now=12.9, drain_seconds=3) == []
    assert transitions.due_for_unload(state.endpoints["emb"], now=13.0, drain_seconds=3) == ["1", "2"]
    assert transitions.due_for_unload(state.endpoints["emb"], now=15.0, drain_seconds=3) == ["1", "2", "5"]


def test_a_drain_started_later_than_now_is_over_rather_than_held_for_ever():
    """Before: a state holding drain_started 1e308 (or any time ahead of the clock) kept the version loaded."""
    state = deployments(("1", "draining"), ("2", "draining"), ("3", "draining"))
    versions = state.endpoints["emb"].versions
    versions["1"].drain_started = 2.0**32
    versions["2"].drain_started = 99.0
    versions["3"].drain_started = 100.5  # another host's clock half a second ahead: it drains its full time
    assert transitions.due_for_unload(state.endpoints["emb"], now=100.0, drain_seconds=3) == ["1"]
    assert transitions.due_for_unload(state.endpoints["emb"], now=103.0, drain_seconds=3) == ["1", "2"]
    assert transitions.due_for_unload(state.endpoints["emb"], now=103.5, drain_seconds=3) == ["1", "2", "3"]


def test_a_draining_version_without_a_start_is_due_and_a_rejected_one_without_is_not():
    """The project always writes a start with `draining`; a state written without one held the version for ever."""
    state = deployments(("1", "draining"), ("2", "rejected"))
    assert transitions.due_for_unload(state.endpoints["emb"], now=100.0, drain_seconds=3) == ["1"]


def test_unloaded_versions_are_forgotten_when_drained_and_kept_when_rejected():
    state = deployments(("1", "draining"), ("2", "rejected"), ("3", "live"))
    state.endpoints["emb"].versions["2"].drain_started = 10.0
    assert transitions.finish_drained(state, "emb", ["1", "2", "9"]) == ["1"]
    versions = state.endpoints["emb"].versions
    assert sorted(versions) == ["2", "3"] and versions["2"].drain_started is None and versions["2"].state == "rejected"


# --- rollouts -------------------------------------------------------------------------------------------------------
def test_a_rollout_step_starts_with_its_baseline():
    state = rolling()
    rollout_transitions.start_rollout_step(state, "emb", 1, {"versions": {"2": {"requests": 3.0}}}, now=42.0)
    rollout = state.endpoints["emb"].rollout
    assert (rollout.step, rollout.step_started, rollout.baseline) == (1, 42.0, {"versions": {"2": {"requests": 3.0}}})


def test_promotion_gives_the_new_version_all_traffic():
    state = rolling(step=2)
    outcome = rollout_transitions.promote(state, "emb", {"new_requests": 30.0})
    endpoint = state.endpoints["emb"]
    assert outcome == "after 3 steps: 30 requests on the new version"
    assert (endpoint.rollout.status, endpoint.rollout.outcome, endpoint.rollout.baseline) == ("promoted", outcome, None)
    assert endpoint.weights == {"2": 1.0} and endpoint.versions["2"].state == "live"


def test_a_rollback_sends_traffic_to_the_stable_version_and_rejects_the_new_one():
    state = rolling(step=1)
    outcome = rollout_transitions.roll_back(state, "emb", "error rate 0.300 > 0.01", {"new_error_rate": 0.3}, now=9.0)
    endpoint = state.endpoints["emb"]
    assert outcome == "rolled back at 50%: error rate 0.300 > 0.01 (0 requests on the new version; error rate 30.00%)"
    rollout = endpoint.rollout
    assert (rollout.status, rollout.outcome, rollout.baseline) == ("rolled_back", outcome, None)
    record = endpoint.versions["2"]
    assert (record.state, record.reason, record.drain_started) == ("rejected", outcome, 9.0)
    assert endpoint.weights == {"1": 1.0}


def test_a_rollback_of_a_version_already_gone_only_moves_traffic():
    state = rolling()
    del state.endpoints["emb"].versions["2"]
    rollout_transitions.roll_back(state, "emb", "r", {}, now=1.0)
    assert state.endpoints["emb"].weights == {"1": 1.0} and "2" not in state.endpoints["emb"].versions


def test_a_rollout_whose_version_was_rejected_at_deployment_ends_with_traffic_where_it_was():
    state = rolling(weights={"1": 1.0})
    outcome = rollout_transitions.abandon_rollout(state, "emb")
    endpoint = state.endpoints["emb"]
    assert outcome == "version 2 was rejected at deployment"
    assert (endpoint.rollout.status, endpoint.rollout.outcome) == ("rolled_back", outcome)
    assert endpoint.weights == {"1": 1.0}
