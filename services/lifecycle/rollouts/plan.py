"""What a rollout will judge, step by step, in words: `serving model rollout --dry-run` prints it, and `serving model
list` says where a running rollout stands. Pure functions of the rollout (the admin API's JSON of a `Rollout`)."""

from __future__ import annotations

import math

from services.lifecycle.deployments import RolloutStatus


def plan(rollout: dict, rate: float | None = None) -> list[str]:
    """One line for the policy, then one per step; `rate`: the endpoint's requests per second now, to say how long
    each step needs for its requests."""
    new, stable = rollout["version"], rollout["stable"]
    lines = [
        f"roll out version {new} against version {stable}: each step lasts at least {rollout['dwell']:g} s and passes "
        f"once each version that gets traffic answered {rollout['min_requests']} requests (waiting up to "
        f"{rollout['max_wait']:g} s more, then rolling back unjudged); a breach rolls back when its one-sided test "
        f"gives p < {rollout['significance']:g}:",
        f"  errors: version {new}'s 5xx rate above {rollout['max_error_rate']:g} (binomial test, judged at any count)",
        f"  latency: version {new}'s p99 above {rollout['max_p99_ratio']:g} x version {stable}'s (Fisher exact test of"
        " the requests slower than that, steps below 100% only)",
    ]
    for index, share in enumerate(rollout["steps"]):
        lines.append(f"  step {index + 1}: {share}% to version {new}: {_step_time(rollout, share, rate)}")
    return lines


def _step_time(rollout: dict, share: int, rate: float | None) -> str:
    judged = "errors only" if share == 100 else "errors and p99"
    if not rate:
        return f"{judged}; no traffic measured now, so no estimate of when it has its requests"
    fewest = min(share, 100 - share) if share < 100 else 100
    needed = math.ceil(rollout["min_requests"] / (rate * fewest / 100))
    if needed <= rollout["dwell"]:
        return f"{judged}; at {rate:g} req/s it has its requests within the dwell"
    if needed <= rollout["dwell"] + rollout["max_wait"]:
        return f"{judged}; at {rate:g} req/s it has its requests after about {needed} s"
    allowed = rollout["dwell"] + rollout["max_wait"]
    return (
        f"{judged}; at {rate:g} req/s it would need about {needed} s, more than the {allowed:g} s allowed: it would "
        "roll back unjudged (raise the traffic, --max-wait, or lower --min-requests)"
    )


def status(rollout: dict) -> str:
    """Where a rollout stands, in one line."""
    new, steps, step = rollout["version"], rollout["steps"], rollout.get("step", 0)
    if rollout.get("status", RolloutStatus.RUNNING) != RolloutStatus.RUNNING:
        return f"rollout of version {new}: {rollout['status'].replace('_', ' ')}: {rollout.get('outcome') or ''}"
    where = f"rollout of version {new}: step {step + 1} of {len(steps)} ({steps[step]}%)"
    if rollout.get("waiting"):
        return f"{where}, past its dwell, {rollout['waiting']}"
    return f"{where}, in its dwell of {rollout['dwell']:g} s"
