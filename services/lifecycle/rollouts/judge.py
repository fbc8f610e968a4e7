"""Judging a rollout step on enough data, as Flagger and Kayenta do: a pure function of the policy, the step's window
(`windows.Snapshot`) and how long the step has waited past its dwell.

- **Errors**: the new version's 5xx rate is a breach when it is above `max_error_rate` and a one-sided binomial test
  says the excess is not chance (p-value below `significance`). The test accounts for the sample size, so a clearly
  failing version rolls back at the first judgement, before `min_requests`.
- **Enough data**: a step passes only once each version that gets traffic in it answered `min_requests` (a p99 of
  fewer is one of the slowest few requests); until then it waits, at most `max_wait` seconds past its dwell, then it
  rolls back, unjudged. At 100% the stable version gets no traffic: only the new one needs the requests, and only
  errors are judged.
- **Latency**: the new version's p99 over the stable one's is a breach when it is above `max_p99_ratio` and the new
  version has more of its requests slower than `max_p99_ratio` times the stable p99 than the stable one has, by a
  one-sided Fisher exact test below `significance` (the two tails compared, each with its sample size).

Why these tests and defaults: docs/decisions/rollout-judgement.md."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from services.lifecycle.deployments import Rollout
from services.lifecycle.rollouts.windows import Snapshot, VersionCounters, count_above, quantile


class Action(StrEnum):
    """What a judged step does next."""

    WAIT = "wait"
    """Short of requests: judged again next tick (within `max_wait` past the dwell)."""
    ADVANCE = "advance"
    """Passed: the next step starts, or after the last one the new version is promoted."""
    ROLLBACK = "rollback"
    """A breach, or out of time for its requests: all traffic back to the stable version."""


@dataclass
class Decision:
    action: Action
    numbers: dict
    reason: str = ""


def p_value_above(hits: float, trials: float, rate: float) -> float:
    """One-sided binomial test: the chance of `hits` or more in `trials` if the true rate were `rate`."""
    from scipy.stats import binom  # imported here: the controller loads it beside its loop (`Rollouts`)

    hits = round(hits)
    if hits <= 0:
        return 1.0
    return float(binom.sf(hits - 1, round(trials), rate))


def p_value_more(hits: float, trials: float, other_hits: float, other_trials: float) -> float:
    """One-sided Fisher exact test: the chance of a share of `hits` in `trials` this far above `other_hits` in
    `other_trials` if both came from the same rate."""
    from scipy.stats import fisher_exact

    hits, trials, other_hits, other_trials = (round(x) for x in (hits, trials, other_hits, other_trials))
    table = [[hits, trials - hits], [other_hits, other_trials - other_hits]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def stable_gets_traffic(rollout: Rollout) -> bool:
    return rollout.steps[rollout.step] < 100


def judge(rollout: Rollout, observed: Snapshot, waited: float = 0.0) -> Decision:
    """The step's decision; `waited`: seconds since its dwell ended."""
    new = observed.versions.get(rollout.version, VersionCounters())
    stable = observed.versions.get(rollout.stable, VersionCounters())
    numbers = {"new_requests": new.requests, "stable_requests": stable.requests}
    if breach := _error_breach(rollout, new, stable, numbers):
        return Decision(Action.ROLLBACK, numbers, breach)
    if missing := _missing(rollout, new, stable):
        if waited >= rollout.max_wait:
            reason = f"not judged: after {rollout.dwell + waited:.0f} s still {missing}"
            return Decision(Action.ROLLBACK, numbers, reason)
        return Decision(Action.WAIT, numbers, f"waiting for {missing}, up to {rollout.max_wait - waited:.0f} s more")
    if stable_gets_traffic(rollout) and (breach := _latency_breach(rollout, new, stable, numbers)):
        return Decision(Action.ROLLBACK, numbers, breach)
    return Decision(Action.ADVANCE, numbers)


def _error_breach(rollout: Rollout, new: VersionCounters, stable: VersionCounters, numbers: dict) -> str | None:
    if not new.requests:
        return None
    rate = new.errors / new.requests
    p_value = p_value_above(new.errors, new.requests, rollout.max_error_rate)
    numbers |= {"new_error_rate": round(rate, 4), "error_p_value": _round(p_value)}
    if stable.requests:
        numbers["stable_error_rate"] = round(stable.errors / stable.requests, 4)
    if rate > rollout.max_error_rate and p_value < rollout.significance:
        return (
            f"error rate {rate:.3f} > {rollout.max_error_rate:g} ({new.errors:.0f} of {new.requests:.0f} requests, "
            f"binomial p = {p_value:.2g} < {rollout.significance:g})"
        )
    return None


def _missing(rollout: Rollout, new: VersionCounters, stable: VersionCounters) -> str | None:
    """What the step lacks before it can pass, in words; None when it has enough."""
    short = [(rollout.version, new.requests)]
    if stable_gets_traffic(rollout):
        short.append((rollout.stable, stable.requests))
    short = [(version, n) for version, n in short if n < rollout.min_requests]
    if not short:
        return None
    have = ", ".join(f"version {version} has {n:.0f}" for version, n in short)
    compared = "the p99 comparison" if stable_gets_traffic(rollout) else "the error rate"
    return f"{rollout.min_requests} requests on each version for {compared} ({have})"


def _latency_breach(rollout: Rollout, new: VersionCounters, stable: VersionCounters, numbers: dict) -> str | None:
    new_p99, stable_p99 = quantile(0.99, new.buckets), quantile(0.99, stable.buckets)
    if new_p99 is None or not stable_p99:
        return None
    ratio = new_p99 / stable_p99
    bound = rollout.max_p99_ratio * stable_p99
    slower, stable_slower = count_above(bound, new.buckets), count_above(bound, stable.buckets)
    p_value = p_value_more(slower, new.requests, stable_slower, stable.requests)
    numbers |= {
        "new_p99_ms": round(new_p99 * 1000, 2),
        "stable_p99_ms": round(stable_p99 * 1000, 2),
        "p99_ratio": round(ratio, 3),
        "new_slower_than_bound": round(slower, 1),
        "stable_slower_than_bound": round(stable_slower, 1),
        "p99_p_value": _round(p_value),
    }
    if ratio > rollout.max_p99_ratio and p_value < rollout.significance:
        return (
            f"p99 ratio {ratio:.2f} > {rollout.max_p99_ratio:g} ({slower:.0f} of {new.requests:.0f} requests slower "
            f"than {bound * 1000:.1f} ms, against {stable_slower:.0f} of {stable.requests:.0f} of version "
            f"{rollout.stable}'s, Fisher p = {p_value:.2g} < {rollout.significance:g})"
        )
    return None


def _round(p_value: float) -> float:
    return float(f"{p_value:.3g}")
