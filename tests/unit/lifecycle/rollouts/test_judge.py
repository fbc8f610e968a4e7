"""A rollout step's judgement on windows built by hand: it waits for enough requests on each side (saying for what),
rolls back on a significant excess only, gives up after `max_wait`; p-values checked against the formulas."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from observability.metrics import LATENCY_BUCKETS
from services.lifecycle.deployments import Rollout, RolloutPolicy
from services.lifecycle.rollouts.judge import judge, p_value_above, p_value_more
from services.lifecycle.rollouts.windows import Snapshot, VersionCounters


def rollout(step: int = 0, **overrides) -> Rollout:
    """The docs' example: steps 10,50,100, dwell 60, max error rate 0.01, max p99 ratio 1.5, the other defaults."""
    policy = {"steps": [10, 50, 100], "dwell": 60, "max_error_rate": 0.01, "max_p99_ratio": 1.5} | overrides
    return Rollout(version="2", stable="1", step=step, **policy)


def counters(latencies, errors: int = 0) -> VersionCounters:
    """Requests that took `latencies` (seconds), `errors` of them 5xx, in the gateway's histogram."""
    latencies = np.asarray(latencies, dtype=float)
    buckets = {f"{bound:g}": float(np.sum(latencies <= bound)) for bound in LATENCY_BUCKETS}
    buckets["+Inf"] = float(len(latencies))
    return VersionCounters(requests=float(len(latencies)), errors=float(errors), buckets=buckets)


def latencies(n: int, seed: int, scale: float = 1.0) -> np.ndarray:
    """`n` latencies around 8 ms with a long tail (log-normal, sigma 0.6: p99 about 32 ms), times `scale`."""
    return scale * np.random.default_rng(seed).lognormal(math.log(0.008), 0.6, n)


def window(new: VersionCounters, stable: VersionCounters | None = None) -> Snapshot:
    return Snapshot(versions={"2": new} | ({"1": stable} if stable is not None else {}))


def test_the_defaults_are_the_documented_ones():
    policy = RolloutPolicy()
    assert (policy.steps, policy.dwell, policy.max_error_rate, policy.max_p99_ratio) == ([10, 50, 100], 60, 0.01, 1.5)
    assert (policy.min_requests, policy.max_wait, policy.significance) == (200, 600, 0.05)


def test_p_values_are_the_binomial_tail():
    # P(X >= 3) for 30 trials at 1%: 1 - P(0) - P(1) - P(2)
    expected = 1 - sum(math.comb(30, k) * 0.01**k * 0.99 ** (30 - k) for k in range(3))
    assert p_value_above(3, 30, 0.01) == pytest.approx(expected, rel=1e-9)
    assert p_value_above(0, 30, 0.01) == 1.0
    assert p_value_above(1, 10, 0.0) == 0.0, "with no error allowed, one error is certain proof"
    # Fisher, one-sided: 2 of 4 against 0 of 4; the tables at least this extreme given the margins: only this one
    assert p_value_more(2, 4, 0, 4) == pytest.approx(math.comb(4, 2) * math.comb(4, 0) / math.comb(8, 2))


def test_the_issue_case_27_requests_and_a_p99_ratio_of_1_58_waits_and_says_for_what():
    """At 5 req/s the first 10% step had 27 requests after 60 s; their p99 is their slowest: no judgement yet."""
    new = counters([0.008] * 26 + [0.0474])
    stable = counters(np.full(243, 0.008).tolist() + [0.03] * 3)
    decision = judge(rollout(), window(new, stable), waited=0.0)
    assert decision.action == "wait"
    assert decision.reason == (
        "waiting for 200 requests on each version for the p99 comparison (version 2 has 27), up to 600 s more"
    )


def test_a_step_waits_for_the_stable_side_too_and_gives_up_after_max_wait():
    new, stable = counters(latencies(250, 1)), counters(latencies(120, 2))
    assert "version 1 has 120" in judge(rollout(step=1), window(new, stable), waited=100).reason
    late = judge(rollout(step=1), window(new, stable), waited=600)
    assert late.action == "rollback"
    assert late.reason.startswith("not judged: after 660 s still 200 requests on each version")


def test_a_healthy_version_with_enough_requests_passes():
    decision = judge(rollout(), window(counters(latencies(200, 3)), counters(latencies(1800, 4))))
    assert decision.action == "advance", decision
    assert decision.numbers["p99_ratio"] < 1.5 and decision.numbers["new_error_rate"] == 0


def test_a_clearly_failing_version_rolls_back_before_min_requests():
    decision = judge(rollout(), window(counters(latencies(30, 5), errors=3), counters(latencies(270, 6))))
    assert decision.action == "rollback"
    assert decision.reason.startswith("error rate 0.100 > 0.01 (3 of 30 requests, binomial p = 0.0033 < 0.05)")


def test_one_error_in_30_is_not_proof_and_the_step_waits():
    decision = judge(rollout(), window(counters(latencies(30, 7), errors=1), counters(latencies(270, 8))))
    assert decision.action == "wait" and decision.numbers["error_p_value"] == pytest.approx(0.26, abs=0.005)


def test_errors_at_the_threshold_do_not_roll_back_but_a_significant_excess_does():
    stable = counters(latencies(1800, 9))
    assert judge(rollout(), window(counters(latencies(400, 10), errors=4), stable)).action == "advance"
    failing = judge(rollout(), window(counters(latencies(400, 10), errors=12), stable))
    assert failing.action == "rollback" and failing.numbers["error_p_value"] < 0.05


def test_a_p99_over_the_ratio_by_chance_passes_and_a_real_slowdown_rolls_back():
    """Both versions have the same rare stalls (1% of requests at 400 ms): the new one caught 3 in 200, which puts
    its p99 among them; the stable one 18 in 1,800, just above its p99."""
    stable = counters(np.concatenate([latencies(1782, 11), [0.4] * 18]))
    lucky = judge(rollout(), window(counters(np.concatenate([latencies(197, 12), [0.4] * 3])), stable))
    assert lucky.numbers["p99_ratio"] > 1.5 and lucky.action == "advance", lucky
    assert lucky.numbers["p99_p_value"] > 0.3
    slow = judge(rollout(), window(counters(latencies(200, 13, scale=2.0)), counters(latencies(1800, 11))))
    assert slow.action == "rollback" and slow.reason.startswith("p99 ratio 2.37 > 1.5 (7 of 200 requests slower than")
    assert "against 1 of 1800 of version 1's, Fisher p = 6.7e-07 < 0.05" in slow.reason


def test_at_100_percent_only_the_new_version_needs_requests_and_only_errors_are_judged():
    full = rollout(step=2)
    assert judge(full, window(counters(latencies(150, 14)))).reason.startswith(
        "waiting for 200 requests on each version for the error rate (version 2 has 150)"
    )
    assert judge(full, window(counters(latencies(200, 14, scale=3.0)))).action == "advance"


def test_max_error_rate_zero_rolls_back_on_one_error():
    decision = judge(rollout(max_error_rate=0.0), window(counters(latencies(5, 15), errors=1)))
    assert decision.action == "rollback" and "1 of 5 requests" in decision.reason


def test_every_threshold_and_its_default_is_in_the_docs_table():
    text = (Path(__file__).parents[4] / "docs" / "lifecycle.md").read_text()
    rows = dict(re.findall(r"^\| `--([a-z0-9-]+)` \| `([^`]+)` \|", text, re.MULTILINE))
    defaults = {
        name.replace("_", "-"): ",".join(map(str, value)) if isinstance(value, list) else f"{value:g}"
        for name, value in RolloutPolicy().model_dump().items()
    }
    assert rows == defaults
