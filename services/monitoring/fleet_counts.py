"""The monitored features of every endpoint version, binned and summed over every gateway worker and pod, as Prometheus
holds them: what the fleet's drift monitor (`fleet_drift`) compares with each version's reference.

The bins are the buckets of the histograms every worker already exports (`observability.metrics`: token length,
embedding norm, top score; a declared scalar variable's own buckets) and the values of its counters (predicted label;
a declared enum variable's values). Each worker bins its values into the same fixed edges whatever traffic it saw and
whichever files it can read, so Prometheus can add them up across workers and pods; no per-request cost is added.
Continuous bins are named by their upper bound (`le`), categorical ones by their value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from services.monitoring.statistics import metric_name
from services.prometheus_api import PrometheusApi

# (feature, Prometheus series, label naming the bin, categorical)
BUILTIN = (
    ("token_length", "serving_endpoint_token_length_bucket", "le", False),
    ("embedding_norm", "serving_endpoint_embedding_norm_bucket", "le", False),
    ("top_score", "serving_endpoint_top_score_bucket", "le", False),
    ("predicted_label", "serving_endpoint_predicted_label_total", "label", True),
)
CUSTOM_PREFIX = "serving_custom_"
# Declared scalar (histogram) and enum (counter by value) variables: (series suffix, label naming the bin, categorical)
CUSTOM = (("_bucket", "le", False), ("_total", "value", True))
Key = tuple[str, str, str]
"""(endpoint, version, feature)"""


class _KeyOf(Protocol):
    """A summed series' label values -> its (endpoint, version, bin)."""

    def __call__(self, labels: tuple, /) -> tuple[str, str, str]: ...


def bound(le: str) -> str:
    """One spelling of a histogram bucket's upper bound, whoever wrote it ('4', '4.0' -> '4.0'; '+Inf')."""
    value = float(le)
    return "+Inf" if math.isinf(value) else repr(value)


@dataclass
class Binned:
    categorical: bool
    counts: dict[str, float] = field(default_factory=dict)
    """bin -> values in it (not cumulative)."""


def per_bin(cumulative: dict[str, float]) -> dict[str, float]:
    """A histogram's cumulative `le` buckets as counts per bin."""
    result, below = {}, 0.0
    for le, count in sorted(cumulative.items(), key=lambda item: float(item[0])):
        result[bound(le)] = max(count - below, 0.0)
        below = max(count, below)
    return result


class FleetFeatureCounts:
    """Reads, for every (endpoint, version, feature), how many values fell in each bin between two instants."""

    def __init__(self, prometheus: PrometheusApi):
        self.prometheus = prometheus

    def read(self, since: float | None, at: float) -> dict[Key, Binned]:
        """Values binned between `since` and `at` (`since` None: since each series started)."""
        found: dict[Key, Binned] = {}
        for feature, series, label, categorical in BUILTIN:
            summed = self.prometheus.summed_increase(series, f"endpoint, version, {label}", since, at)
            self._add(found, summed, feature, categorical, lambda labels: labels)
        for family, endpoint, feature, label, categorical in self.custom_families(at):
            summed = self.prometheus.summed_increase(family, f"version, {label}", since, at)
            self._add(found, summed, feature, categorical, lambda labels, e=endpoint: (e, *labels))
        return found

    @staticmethod
    def _add(
        found: dict[Key, Binned],
        summed: dict[tuple, float],
        feature: str,
        categorical: bool,
        key: _KeyOf,
    ) -> None:
        grouped: dict[tuple[str, str], dict[str, float]] = {}
        for labels, count in summed.items():
            endpoint, version, name = key(labels)
            grouped.setdefault((endpoint, version), {})[name] = count
        for (endpoint, version), counts in grouped.items():
            found[(endpoint, version, feature)] = Binned(categorical, counts if categorical else per_bin(counts))

    def custom_families(self, at: float) -> list[tuple[str, str, str, str, bool]]:
        """Declared scalar (histogram) and enum (counter by value) variables, each (series, endpoint, feature, bin
        label, categorical). Their endpoint is in the series' name (`statistics.metric_name`): the longest endpoint
        that Prometheus has requests of whose name prefixes it."""
        endpoints = [labels["endpoint"] for labels, _ in self.prometheus.query(ENDPOINTS, at) if "endpoint" in labels]
        families = []
        for suffix, label, categorical in CUSTOM:
            for labels, _ in self.prometheus.query(SCALARS if suffix == "_bucket" else ENUMS, at):
                name = labels.get("__name__", "")
                if found := custom_feature(name, suffix, endpoints):
                    families.append((name, *found, label, categorical))
        return families


def custom_feature(name: str, suffix: str, endpoints: Iterable[str]) -> tuple[str, str] | None:
    """(endpoint, `custom:<variable>`) of a declared variable's series `name` (`statistics.metric_name` + `suffix`):
    the longest of `endpoints` whose name prefixes it; None when none does."""
    if not (name.startswith(CUSTOM_PREFIX) and name.endswith(suffix)):
        return None
    prefixes = sorted(((metric_name(e, ""), e) for e in set(endpoints)), key=lambda p: len(p[0]), reverse=True)
    for prefix, endpoint in prefixes:
        if name.startswith(prefix) and len(name) > len(prefix) + len(suffix):
            return endpoint, f"custom:{name[len(prefix) : -len(suffix)]}"
    return None


ENDPOINTS = "group by (endpoint) (serving_endpoint_requests_total)"
SCALARS = f'group by (__name__) ({{__name__=~"{re.escape(CUSTOM_PREFIX)}.+_bucket"}})'
ENUMS = f'group by (__name__) ({{__name__=~"{re.escape(CUSTOM_PREFIX)}.+_total",value!=""}})'
