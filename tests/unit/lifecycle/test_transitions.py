"""The rules the admin API applies to the deployment state, on their own, and every refusal of any transition: its
error type, its message, and a state left as it was."""

from __future__ import annotations

import pytest

from services.common.errors import Conflict, InvalidInput, NotFound
from services.lifecycle import transitions
from services.lifecycle.deployments import Deployments, EndpointState, RolloutStatus, VersionState
from services.lifecycle.rollouts import transitions as rollout_transitions
from services.triton.repository import MODELS
from tests.unit.lifecycle.states import POLICY, deployments, rolling

# --- refusals -------------------------------------------------------------------------------------------------------
REFUSALS = [
    pytest.param(
        lambda s: transitions.canary(s, "nope", [1.0], ["1"]),
        NotFound,
        "no deployed endpoint 'nope'",
        id="unknown endpoint",
    ),
    pytest.param(
        lambda s: transitions.set_auto_update(s, "encoder", "m", 2), InvalidInput, "built-in stack", id="reserved name"
    ),
    pytest.param(
        lambda s: transitions.canary(s, "emb", [1.0], ["3"]),
        Conflict,
        "version 3 of 'emb' is still loading .*; try again once it is live",
        id="canary of a loading version",
    ),
    pytest.param(
        lambda s: transitions.canary(s, "emb", [1.0], ["9"]),
        Conflict,
        "'emb' has no version 9",
        id="canary of an unknown version",
    ),
    pytest.param(
        lambda s: transitions.start_rollout(s, "emb", "4", **POLICY),
        Conflict,
        r"version 4 of 'emb' is rejected \(bad\), not live \(live: \['2', '1'\]\); deploy it again first: "
        r"`serving model redeploy emb --version 4`",
        id="rollout of a rejected version",
    ),
    pytest.param(
        lambda s: transitions.start_rollout(s, "emb", "9", **POLICY),
        Conflict,
        "'emb' has no version 9 .*`serving model list emb` shows its versions",
        id="rollout of an unknown version",
    ),
    pytest.param(
        lambda s: transitions.redeploy(s, "emb", "2"),
        Conflict,
        "version 2 of 'emb' is live already: nothing to deploy again",
        id="redeploy a live version",
    ),
    pytest.param(
        lambda s: transitions.redeploy(s, "emb", "9"),
        NotFound,
        r"'emb' never had version 9 \(it had \['1', '2', '3', '4'\]\); the controller deploys new registry versions",
        id="redeploy an unknown version",
    ),
    pytest.param(
        lambda s: transitions.remove(s, "emb", "9", 0.0),
        NotFound,
        "'emb' has no version 9",
        id="remove an unknown version",
    ),
    pytest.param(
        lambda s: rollout_transitions.start_rollout_step(s, "emb", 1, {}, 0.0),
        Conflict,
        "no running rollout",
        id="step without a rollout",
    ),
    pytest.param(
        lambda s: rollout_transitions.promote(s, "emb", {}),
        Conflict,
        "no running rollout",
        id="promote without a rollout",
    ),
    pytest.param(
        lambda s: rollout_transitions.roll_back(s, "emb", "r", {}, 0.0),
        Conflict,
        "no running rollout",
        id="roll back without a rollout",
    ),
    pytest.param(
        lambda s: rollout_transitions.abandon_rollout(s, "emb"),
        Conflict,
        "no running rollout",
        id="abandon without a rollout",
    ),
]


@pytest.mark.parametrize("change, error, message", REFUSALS)
def test_a_refusal_raises_its_error_and_changes_nothing(change, error, message):
    state = deployments(("1", "live"), ("2", "live"), ("3", "loading"), ("4", "rejected"))
    state.endpoints["emb"].versions["4"].reason = "bad"
    before = state.model_dump()
    with pytest.raises(error, match=message):
        change(state)
    assert state.model_dump() == before


def test_an_unknown_endpoint_is_named_with_the_deployed_ones():
    with pytest.raises(NotFound, match="deployed: none"):
        transitions.endpoint(Deployments(), "emb")
    with pytest.raises(NotFound, match="deployed: a, emb"):
        transitions.endpoint(Deployments(endpoints={"emb": EndpointState(), "a": EndpointState()}), "b")


@pytest.mark.parametrize("name", MODELS)
def test_every_built_in_model_name_is_refused_as_an_endpoint(name):
    with pytest.raises(InvalidInput, match=f"'{name}' names a model of the built-in stack"):
        transitions.set_auto_update(Deployments(), name, "m", 2)


@pytest.mark.parametrize("name", ["..", "../../etc", "a\nb", "Emb", "e" * 64, ".hidden", "a/b"])
def test_an_endpoint_is_created_only_under_a_valid_name(name):
    """The name becomes a Triton model directory (`models_dir/NAME/VERSION`): before, any string was accepted."""
    state = Deployments()
    with pytest.raises(InvalidInput, match="is not valid: use 1 to 63 lowercase"):
        transitions.set_auto_update(state, name, "m", 2)
    assert state.endpoints == {}


def test_a_rollout_needs_another_live_version_to_compare_with():
    with pytest.raises(
        Conflict, match="'emb' has no other version taking traffic to compare version 1 with"
    ) as refused:
        transitions.start_rollout(deployments(("1", "live")), "emb", "1", **POLICY)
    assert "`serving model redeploy emb --version N` brings a rejected or removed version back" in str(refused.value)


def test_a_rollout_against_a_live_version_without_traffic_says_to_give_it_traffic_back():
    state = deployments(("1", "live"), ("2", "live"))
    state.endpoints["emb"].weights = {"2": 1.0}  # pinned: version 1 is live at 0%
    with pytest.raises(Conflict) as refused:
        transitions.start_rollout(state, "emb", "2", **POLICY)
    assert "(live: 2, 1); give the one it replaces its traffic back first: `serving model canary emb --versions 1 " in (
        str(refused.value)
    )


def test_a_rejected_or_removed_version_is_deployed_again_as_a_new_one():
    state = deployments(("1", "live"), ("2", "rejected"), ("3", "draining"))
    item = state.endpoints["emb"]
    item.versions["2"].reason, item.removed = "rolled back at 10%", ["3", "5"]
    for version in ("2", "3", "5"):
        transitions.redeploy(state, "emb", version)
    assert {v: (r.state, r.reason) for v, r in item.versions.items()} == {
        "1": ("live", None),
        "2": ("loading", None),
        "3": ("loading", None),
        "5": ("loading", None),
    }
    assert item.removed == [], "auto-update no longer skips them"


def test_a_finished_rollout_takes_no_more_steps():
    state = rolling()
    state.endpoints["emb"].rollout.status = RolloutStatus.PROMOTED
    with pytest.raises(Conflict, match="no running rollout"):
        rollout_transitions.start_rollout_step(state, "emb", 1, {}, 0.0)


# --- the admin API's transitions ------------------------------------------------------------------------------------
def test_auto_update_creates_the_endpoint_then_changes_only_its_source():
    state = Deployments()
    transitions.set_auto_update(state, "emb", "tiny-emb", 3)
    assert state.endpoints["emb"].registered_name == "tiny-emb" and state.endpoints["emb"].max_versions == 3
    state.endpoints["emb"].versions["1"] = VersionState(version="1", state="live")
    transitions.set_auto_update(state, "emb", "other", 1)
    assert state.endpoints["emb"].registered_name == "other" and state.endpoints["emb"].max_versions == 1
    assert list(state.endpoints["emb"].versions) == ["1"]


def test_a_canary_by_versions_sets_their_weights_and_returns_the_shares():
    state = deployments(("1", "live"), ("2", "live"), newest_weights=[1.0, 1.0])
    shares = transitions.canary(state, "emb", [1.0, 3.0], ["1", "2"])
    assert shares == {"1": 0.25, "2": 0.75}
    assert state.endpoints["emb"].weights == {"1": 1.0, "2": 3.0} and state.endpoints["emb"].newest_weights == []


def test_a_canary_over_the_newest_versions_clears_the_split_by_version():
    state = deployments(("1", "live"), ("2", "live"), weights={"1": 1.0})
    assert transitions.canary(state, "emb", [0.9, 0.1]) == {"2": 0.9, "1": 0.1}
    assert state.endpoints["emb"].weights == {} and state.endpoints["emb"].newest_weights == [0.9, 0.1]


def test_a_canary_replaces_a_running_rollout_and_leaves_a_finished_one():
    state = rolling()
    transitions.canary(state, "emb", [1.0], ["1"])
    rollout = state.endpoints["emb"].rollout
    assert (rollout.status, rollout.outcome) == ("rolled_back", "replaced by a canary split")
    state = rolling()
    state.endpoints["emb"].rollout.status = RolloutStatus.PROMOTED
    transitions.canary(state, "emb", [1.0], ["1"])
    assert state.endpoints["emb"].rollout.status == "promoted" and state.endpoints["emb"].rollout.outcome is None


def test_a_rollout_is_judged_against_the_version_with_most_traffic_and_ends_any_split():
    state = deployments(("1", "live"), ("2", "live"), ("3", "loading"), weights={"1": 0.2, "2": 0.8})
    rollout = transitions.start_rollout(state, "emb", "3", **POLICY)
    assert (rollout.version, rollout.stable, rollout.steps, rollout.step, rollout.status) == (
        "3",
        "2",
        [10, 50, 100],
        0,
        "running",
    )
    assert state.endpoints["emb"].rollout is rollout and state.endpoints["emb"].weights == {}


def test_removing_a_version_drains_it_from_now_and_drops_its_weight():
    state = deployments(("1", "live"), ("2", "live"), weights={"1": 0.5, "2": 0.5})
    transitions.remove(state, "emb", "1", now=100.0)
    record = state.endpoints["emb"].versions["1"]
    assert (record.state, record.drain_started) == ("draining", 100.0)
    assert state.endpoints["emb"].weights == {"2": 0.5}
