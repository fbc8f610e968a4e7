"""The monitored features binned on this host: the histograms and counters of every worker merged, as the host's
`/metrics` shows them (`observability.metrics.merged_registry`), read as their growth since the previous reading.

The same features, bins and counter arithmetic as `fleet_counts`, where Prometheus sums them over every host: a
continuous feature's bins are its histogram's buckets named by their upper bound, a categorical one's its counter's
label values; a series that went back (its worker restarted without its files, or the host's counters were cleared)
counts what it holds now, from its restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from observability.metrics import merged_registry
from services.monitoring.fleet_counts import BUILTIN, CUSTOM, Binned, Key, custom_feature, per_bin

Sample = tuple[str, dict[str, str], float]
"""(series name, labels, value) of one exported sample."""
Cumulative = dict[Key, tuple[bool, dict[str, float]]]
"""(endpoint, version, feature) -> (categorical, bin label as exported -> count so far; cumulative for histograms)."""
REQUESTS = "serving_endpoint_requests_total"
SERIES = {series: (feature, label, categorical) for feature, series, label, categorical in BUILTIN}


def merged_samples() -> Iterator[Sample]:
    """Every sample this host exports, merged over its workers."""
    for family in merged_registry().collect():
        for sample in family.samples:
            yield sample.name, sample.labels, sample.value


def locate(name: str, labels: dict[str, str], endpoints: set[str]) -> tuple[Key, bool, str] | None:
    """The feature bin a sample counts: ((endpoint, version, feature), categorical, bin label); None: no feature's."""
    if name in SERIES:
        feature, label, categorical = SERIES[name]
        if {"endpoint", "version", label} <= labels.keys():
            return (labels["endpoint"], labels["version"], feature), categorical, labels[label]
        return None
    for suffix, label, categorical in CUSTOM:
        if label in labels and "version" in labels and (found := custom_feature(name, suffix, endpoints)):
            endpoint, feature = found
            return (endpoint, labels["version"], feature), categorical, labels[label]
    return None


def cumulative_counts(samples: Iterable[Sample]) -> Cumulative:
    """The features' counts so far, from one reading of the exported samples."""
    samples = list(samples)
    endpoints = {labels["endpoint"] for name, labels, _ in samples if name == REQUESTS and "endpoint" in labels}
    found: Cumulative = {}
    for name, labels, value in samples:
        where = locate(name, labels, endpoints)
        if where is not None:
            key, categorical, label = where
            found.setdefault(key, (categorical, {}))[1][label] = value
    return found


def growth(now: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """Per series, what it gained since `before`; one that went back counts what it holds now."""
    grown = {}
    for name, value in now.items():
        earlier = before.get(name, 0.0)
        grown[name] = value - earlier if value >= earlier else value
    return grown


class HostFeatureCounts:
    """Reads, for every (endpoint, version, feature), how many values this host's workers binned since the previous
    reading (`read` is `fleet_drift.FleetDrift`'s source, as `fleet_counts.FleetFeatureCounts.read` is for a fleet)."""

    def __init__(self, samples: Callable[[], Iterable[Sample]] = merged_samples):
        self.samples = samples
        self.last: Cumulative = {}

    def read(self, since: float | None, at: float) -> dict[Key, Binned]:
        """Values binned since the previous reading (the first: since the workers started); the instants are the
        caller's bookkeeping: a host's counters are read as they are now."""
        current = cumulative_counts(self.samples())
        found = {}
        for key, (categorical, counts) in current.items():
            grown = growth(counts, self.last.get(key, (categorical, {}))[1])
            found[key] = Binned(categorical, grown if categorical else per_bin(grown))
        self.last = current
        return found
