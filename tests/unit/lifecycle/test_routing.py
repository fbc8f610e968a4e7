"""Traffic policy: which live version answers, by weight, sticky per caller key."""

from collections import Counter

import pytest

from services.lifecycle.deployments import EndpointState, Rollout, RolloutStatus, VersionState
from services.lifecycle.routing import Precedence, effective_weights, governing, pick


def endpoint(live=("1", "2", "3"), **policy) -> EndpointState:
    versions = {v: VersionState(version=v, state="live") for v in live}
    versions["4"] = VersionState(version="4", state="loading")
    return EndpointState(versions=versions, **policy)


def test_the_newest_live_version_takes_all_by_default():
    assert effective_weights(endpoint()) == {"3": 1.0}
    assert effective_weights(endpoint(live=())) == {}


def test_a_canary_split_ignores_versions_that_are_not_live():
    assert effective_weights(endpoint(weights={"3": 0.1, "2": 0.9})) == pytest.approx({"3": 0.1, "2": 0.9})
    assert effective_weights(endpoint(weights={"4": 0.5, "2": 0.5})) == {"2": 1.0}
    assert effective_weights(endpoint(newest_weights=[0.25, 0.75])) == pytest.approx({"3": 0.25, "2": 0.75})


def test_a_running_rollout_sets_the_split_of_its_step():
    rollout = Rollout(version="3", stable="2", steps=[10, 50, 100], dwell=1, max_error_rate=0.01, max_p99_ratio=1.5)
    assert effective_weights(endpoint(rollout=rollout)) == pytest.approx({"3": 0.1, "2": 0.9})
    rollout.step = 2
    assert effective_weights(endpoint(rollout=rollout)) == {"3": 1.0}
    rollout.status = RolloutStatus.ROLLED_BACK
    assert effective_weights(endpoint(rollout=rollout, weights={"2": 1})) == {"2": 1.0}


def test_the_first_rule_that_applies_governs_and_a_rollout_needs_both_versions_live():
    running = Rollout(version="3", stable="2", steps=[10, 100])
    not_live = Rollout(version="4", stable="3", steps=[10, 100])
    cases = [
        (endpoint(rollout=running, weights={"1": 1}, newest_weights=[1]), Precedence.ROLLOUT),
        (endpoint(rollout=not_live, weights={"1": 1}), Precedence.BY_VERSION),
        (endpoint(rollout=not_live, newest_weights=[1, 1]), Precedence.NEWEST_SPLIT),
        (endpoint(rollout=not_live), Precedence.NEWEST),
    ]
    for item, rule in cases:
        assert governing(item, item.live()) == rule


def test_picks_follow_the_weights_and_a_key_sticks_to_one_version():
    weights = {"1": 0.1, "2": 0.9}
    counts = Counter(pick(weights) for _ in range(20_000))
    assert abs(counts["1"] / 20_000 - 0.1) < 0.01
    keyed = Counter(pick(weights, f"user-{i}") for i in range(20_000))
    assert abs(keyed["1"] / 20_000 - 0.1) < 0.01, "keys spread like random draws"
    assert len({pick(weights, "user-42") for _ in range(100)}) == 1
