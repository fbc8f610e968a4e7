"""Judging a rollout step: the new version's error rate and p99 latency against the stable version's, over the
dwell window, from the gateways' per-version metrics (`serving_endpoint_requests_total`,
`serving_endpoint_latency_seconds`) summed over the fleet. Pure functions: a snapshot is parsed from /metrics text, a
window is the difference of two snapshots (`fleet_window`: of every gateway's, summed), a decision is made from a
window. Where the windows come from (every gateway read, or Prometheus) is `services.lifecycle.controller
.gateway_metrics`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

from services.lifecycle.state import Rollout


class VersionCounters(BaseModel):
    requests: float = 0.0
    errors: float = 0.0
    """Responses with a 5xx status: the version failed (a 4xx is the caller's fault)."""
    buckets: dict[str, float] = Field(default_factory=dict)
    """Cumulative latency histogram: upper bound (seconds, as text; '+Inf') -> count."""


class Snapshot(BaseModel):
    versions: dict[str, VersionCounters] = Field(default_factory=dict)


def parse_snapshot(metrics_text: str, endpoint: str) -> Snapshot:
    snapshot = Snapshot()
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.labels.get("endpoint") != endpoint:
                continue
            counters = snapshot.versions.setdefault(sample.labels["version"], VersionCounters())
            if sample.name == "serving_endpoint_requests_total":
                counters.requests += sample.value
                if sample.labels["code"].startswith("5"):
                    counters.errors += sample.value
            elif sample.name == "serving_endpoint_latency_seconds_bucket":
                le = sample.labels["le"]
                counters.buckets[le] = counters.buckets.get(le, 0.0) + sample.value
    return snapshot


def window(before: Snapshot, after: Snapshot) -> Snapshot | None:
    """What happened between two snapshots; None if a counter went backwards (the gateway restarted)."""
    result = Snapshot()
    for version, now in after.versions.items():
        then = before.versions.get(version, VersionCounters())
        delta = VersionCounters(
            requests=now.requests - then.requests,
            errors=now.errors - then.errors,
            buckets={le: n - then.buckets.get(le, 0.0) for le, n in now.buckets.items()},
        )
        if delta.requests < 0 or delta.errors < 0 or any(n < 0 for n in delta.buckets.values()):
            return None
        result.versions[version] = delta
    return result


def add(total: Snapshot, more: Snapshot) -> Snapshot:
    """The two snapshots' counters summed, version by version and bucket by bucket."""
    result = total.model_copy(deep=True)
    for version, counters in more.versions.items():
        into = result.versions.setdefault(version, VersionCounters())
        into.requests += counters.requests
        into.errors += counters.errors
        for le, n in counters.buckets.items():
            into.buckets[le] = into.buckets.get(le, 0.0) + n
    return result


def fleet_window(before: dict[str, Snapshot], after: dict[str, Snapshot]) -> Snapshot:
    """What every gateway answered between two readings of the fleet (gateway -> its snapshot), summed. A gateway whose
    counters went back (it restarted) contributes what it counted since its restart, and one absent before (it joined)
    all it counted: a restart restarts that gateway's contribution, not the fleet's window (as Prometheus' counters
    do). A gateway absent after (gone) contributes nothing."""
    total = Snapshot()
    for gateway, now in after.items():
        then = before.get(gateway)
        delta = window(then, now) if then is not None else None
        total = add(total, delta if delta is not None else now)
    return total


def quantile(q: float, buckets: dict[str, float]) -> float | None:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket the rank falls in."""
    bounds = sorted(((math.inf if le == "+Inf" else float(le)), n) for le, n in buckets.items())
    if not bounds or bounds[-1][1] <= 0:
        return None
    rank = q * bounds[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in bounds:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return bounds[-2][0] if len(bounds) > 1 else None


@dataclass
class Decision:
    action: str  # wait | advance | rollback
    numbers: dict
    reason: str = ""


def judge(rollout: Rollout, observed: Snapshot) -> Decision:
    new = observed.versions.get(rollout.version, VersionCounters())
    stable = observed.versions.get(rollout.stable, VersionCounters())
    numbers = {"new_requests": new.requests, "stable_requests": stable.requests}
    if new.requests < rollout.min_requests:
        return Decision("wait", numbers, f"version {rollout.version} answered {new.requests:.0f} requests so far")
    error_rate = new.errors / new.requests
    numbers["new_error_rate"] = round(error_rate, 4)
    if stable.requests:
        numbers["stable_error_rate"] = round(stable.errors / stable.requests, 4)
    if error_rate > rollout.max_error_rate:
        return Decision("rollback", numbers, f"error rate {error_rate:.3f} > {rollout.max_error_rate:g}")
    new_p99 = quantile(0.99, new.buckets)
    if stable.requests >= rollout.min_requests and new_p99 is not None:
        stable_p99 = quantile(0.99, stable.buckets)
        if stable_p99:
            ratio = new_p99 / stable_p99
            numbers |= {
                "new_p99_ms": round(new_p99 * 1000, 2),
                "stable_p99_ms": round(stable_p99 * 1000, 2),
                "p99_ratio": round(ratio, 3),
            }
            if ratio > rollout.max_p99_ratio:
                return Decision("rollback", numbers, f"p99 ratio {ratio:.2f} > {rollout.max_p99_ratio:g}")
    return Decision("advance", numbers)
