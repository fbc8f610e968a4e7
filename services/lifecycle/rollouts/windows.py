"""The numbers a rollout step is judged on: each version's requests, 5xx errors and latency histogram over the
dwell window, from the gateways' per-version metrics (`serving_endpoint_requests_total`,
`serving_endpoint_latency_seconds`) summed over the fleet. Pure functions: a snapshot is parsed from /metrics text, a
window is the difference of two snapshots (`fleet_window`: of every gateway's, summed). How a window is judged is
`judge`; where the windows come from (every gateway read, or Prometheus) is
`services.controller.gateway_metrics`."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field


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


def count_above(x: float, buckets: dict[str, float]) -> float:
    """Observations above `x` in a cumulative histogram, interpolated linearly inside the bucket `x` falls in (as
    `quantile` interpolates); all of the `+Inf` bucket's are above any finite bound."""
    bounds = sorted(((math.inf if le == "+Inf" else float(le)), n) for le, n in buckets.items())
    if not bounds:
        return 0.0
    total = bounds[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in bounds:
        if x <= bound:
            if math.isinf(bound):
                return total - lower_count
            below = lower_count + (count - lower_count) * (x - lower_bound) / (bound - lower_bound)
            return total - below
        lower_bound, lower_count = bound, count
    return 0.0
