"""Why each version gets its share, in each case of the routing precedence: a running rollout, the pin a finished
rollout left, a canary split, the newest live version; and versions that get none (draining, loading, rejected)."""

from __future__ import annotations

from services.lifecycle import transitions
from services.lifecycle.deployments import Phase
from services.lifecycle.rollouts import transitions as rollout_transitions
from services.lifecycle.routing import effective_weights
from services.lifecycle.shares import hand_back, share_reasons
from tests.unit.lifecycle.states import deployments, rolling

HAND_BACK = "serving model canary emb --newest 1 --weights 1"


def test_without_a_policy_the_newest_live_version_takes_all():
    state = deployments(("1", "live"), ("2", "live"), ("3", "loading"), ("4", "rejected"), ("5", "draining"))
    assert share_reasons("emb", state.endpoints["emb"]) == {
        "1": "older than version 2, the newest, which takes all",
        "2": "newest live version: takes all",
        "3": "loading: no traffic until its checks pass",
        "4": "rejected: no traffic; `serving model redeploy emb --version 4` retries it",
        "5": "draining: no new traffic, unloaded after the drain period",
    }


def test_a_running_rollout_says_its_step():
    assert hand_back("emb", rolling(step=1).endpoints["emb"]) is None
    reasons = share_reasons("emb", rolling(step=1).endpoints["emb"])
    assert reasons == {
        "1": "rollout: step 2 of 3, the stable version keeps the rest (50%)",
        "2": "rollout: step 2 of 3, 50% to it",
    }
    last = share_reasons("emb", rolling(step=2).endpoints["emb"])["1"]
    assert last == "rollout: step 3 of 3, the stable version: no traffic at 100% (only errors are judged)"


def test_a_finished_rollout_pins_its_version_and_a_newer_one_gets_none_until_handed_back():
    state = rolling()
    rollout_transitions.roll_back(state, "emb", "error rate", {}, now=1.0)
    transitions.redeploy(state, "emb", "2")
    state.endpoints["emb"].versions["2"].state = Phase.LIVE  # deployed again
    reasons = share_reasons("emb", state.endpoints["emb"])
    assert effective_weights(state.endpoints["emb"]) == {"1": 1.0}
    assert reasons == {
        "1": "pinned by the rollback of version 2: takes all",
        "2": "pinned by the rollback of version 2: none",
    }
    assert hand_back("emb", state.endpoints["emb"]) == HAND_BACK
    transitions.canary(state, "emb", [1.0])  # the command above: --newest 1 --weights 1
    assert effective_weights(state.endpoints["emb"]) == {"2": 1.0}
    assert share_reasons("emb", state.endpoints["emb"])["2"] == "canary over the newest 1: the newest, weight 1"
    assert hand_back("emb", state.endpoints["emb"]) is None


def test_a_canary_split_by_version_names_the_way_back():
    state = deployments(("1", "live"), ("2", "live"), ("3", "live"))
    transitions.canary(state, "emb", [0.1, 0.9], ["2", "1"])
    reasons = share_reasons("emb", state.endpoints["emb"])
    assert (reasons["1"], reasons["3"]) == ("in the canary split", "not in the canary split: none")
    assert hand_back("emb", state.endpoints["emb"]) == HAND_BACK
