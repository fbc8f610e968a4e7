"""Drift judged on merged counts: each endpoint version's values binned and summed over many workers, compared with
the version's reference, one score per (endpoint, version, feature, method) for all of them.

The counts come from `read`: Prometheus' sums over every worker and pod of a fleet (`fleet_counts`, the controller's
monitor), or one host's workers merged (`host_counts`, the judge worker of `drift`), read every `interval`:
- the reference is the version's data set (`drift_reference.json`, which the controller wrote beside the version),
  binned into the same edges, else the first `reference_size` values (kept in `reference_file`, so that a restarted
  judge keeps judging against the same reference);
- the window is the most recent values: from the latest earlier reading that leaves at least `window_size` of them,
  or from the reference's end while there are fewer;
- with `min_samples` in both, the Population Stability Index (every feature) and, for continuous features, the
  Kolmogorov-Smirnov distance between the two binned distributions (the largest gap between their cumulative shares at
  the bins' edges) are exported as `serving_drift_score{endpoint,version,feature,method}`: what the
  `ModelInputDrift` alert reads (PSI > 0.25).
Many workers thus need the traffic one worker needs, however many share it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Gauge

from services.monitoring.fleet_counts import Binned, Key

log = logging.getLogger(__name__)
STALE_SECONDS = 3600.0
MAX_MARKS = 1000
EPSILON = 1e-4
"""Smallest share a bin counts with: an empty bin on one side gives a large but finite PSI."""


class Settings(Protocol):
    reference_size: int
    window_size: int
    min_samples: int
    interval: float


References = Callable[[str, str], dict | None]
"""(endpoint, version) -> the version's data-set reference (`drift_reference.json`'s content), or None."""


def psi_of_shares(expected: np.ndarray, actual: np.ndarray) -> float:
    """PSI of two distributions given as shares of the same bins (each summing to 1)."""
    expected, actual = np.clip(expected, EPSILON, None), np.clip(actual, EPSILON, None)
    return float(np.sum((actual - expected) * np.log(actual / expected)))


def minus(total: dict[str, float], mark: dict[str, float]) -> dict[str, float]:
    return {b: max(n - mark.get(b, 0.0), 0.0) for b, n in total.items()}


def binned_scores(reference: dict[str, float], window: dict[str, float], categorical: bool) -> dict[str, float]:
    """PSI of the window against the reference over the union of their bins; KS as well for continuous bins."""
    bins = sorted(set(reference) | set(window), key=(lambda b: b) if categorical else float)
    expected = np.array([reference.get(b, 0.0) for b in bins])
    actual = np.array([window.get(b, 0.0) for b in bins])
    expected, actual = expected / expected.sum(), actual / actual.sum()
    scores = {"psi": psi_of_shares(expected, actual)}
    if not categorical:
        scores["ks"] = float(np.max(np.abs(np.cumsum(expected) - np.cumsum(actual))))
    return scores


def bin_values(values: list, categorical: bool, bounds: list[str]) -> dict[str, float]:
    """Data-set values counted into the fleet's bins: categorical by value, continuous by the first upper bound at or
    above each value (a Prometheus bucket's `le`)."""
    if categorical:
        return {str(k): float(n) for k, n in Counter(str(v) for v in values).items()}
    edges = np.array([float(b) for b in bounds])
    index = np.searchsorted(edges, np.asarray(values, dtype=float), side="left")
    return {bounds[i]: float(n) for i, n in Counter(index.clip(0, len(bounds) - 1).tolist()).items()}


@dataclass
class Track:
    """One (endpoint, version, feature) of the fleet."""

    categorical: bool
    total: dict[str, float] = field(default_factory=dict)
    """Values per bin since the monitor started (counter restarts already accounted for by the reading)."""
    reference: dict[str, float] | None = None
    marks: list[dict[str, float]] = field(default_factory=list)
    """`total` at earlier readings since the reference, oldest first: where a window can start."""
    seen: float = field(default_factory=time.time)

    def window(self, size: int) -> dict[str, float]:
        """The most recent values: from the latest mark that leaves at least `size`, or from the first."""
        start = 0
        for index in range(len(self.marks) - 1, -1, -1):
            if sum(minus(self.total, self.marks[index]).values()) >= size:
                start = index
                break
        del self.marks[:start]
        return minus(self.total, self.marks[0])


class FleetDrift:
    def __init__(
        self,
        read: Callable[[float | None, float], dict[Key, Binned]],
        settings: Settings,
        references: References = lambda endpoint, version: None,
        registry: CollectorRegistry | None = None,
        reference_file: Path | None = None,
        gauge: Gauge | None = None,
    ):
        """`read(since, at)`: the binned values between two instants, of the fleet (`fleet_counts
        .FleetFeatureCounts`) or of one host's workers (`host_counts.HostFeatureCounts`); the scores go to `gauge`,
        else to a `serving_drift_score` gauge of its own in `registry`."""
        self.read, self.settings, self.references = read, settings, references
        self.tracks: dict[Key, Track] = {}
        self.last: float | None = None
        self.reference_file = reference_file
        self.kept = self._load_kept()
        if gauge is None:
            gauge = Gauge(
                "serving_drift_score",
                "Distance of the fleet's live traffic (every gateway worker and pod) from the version's reference "
                "(psi: Population Stability Index; ks: Kolmogorov-Smirnov distance of the binned distributions)",
                ["endpoint", "version", "feature", "method"],
                registry=registry,
            )
        self.gauge = gauge

    def poll(self, now: float) -> None:
        """Add what the fleet binned since the last reading; set references and window starts where due."""
        for key, binned in self.read(self.last, now).items():
            track = self.tracks.setdefault(key, Track(binned.categorical))
            if any(binned.counts.values()):
                track.seen = now
            for name, count in binned.counts.items():
                track.total[name] = track.total.get(name, 0.0) + count
        self.last = now
        for key, track in self.tracks.items():
            if track.reference is None:
                track.reference = self._reference(key, track)
                if track.reference is not None:
                    track.marks = [dict(track.total)]
            elif track.total != track.marks[-1]:
                track.marks.append(dict(track.total))
                del track.marks[:-MAX_MARKS]

    def _reference(self, key: Key, track: Track) -> dict[str, float] | None:
        endpoint, version, feature = key
        kept = self.kept.get("\t".join(key))
        if kept is not None:
            return kept
        dataset = (self.references(endpoint, version) or {}).get(feature)
        if dataset and track.total:
            bounds = [] if track.categorical else sorted(track.total, key=float)
            return bin_values(dataset["values"], track.categorical, bounds)
        if sum(track.total.values()) >= self.settings.reference_size:
            self.kept["\t".join(key)] = dict(track.total)
            self._save_kept()
            return dict(track.total)
        return None

    def scores(self) -> dict[tuple[str, str, str, str], float]:
        result = {}
        for (endpoint, version, feature), track in self.tracks.items():
            if track.reference is None or sum(track.reference.values()) < self.settings.min_samples:
                continue
            window = track.window(self.settings.window_size)
            if sum(window.values()) < self.settings.min_samples:
                continue
            for method, score in binned_scores(track.reference, window, track.categorical).items():
                result[(endpoint, version, feature, method)] = score
        return result

    def export(self, now: float) -> None:
        for labels, score in self.scores().items():
            if math.isfinite(score):
                self.gauge.labels(*labels).set(round(score, 6))
        for key in [k for k, track in self.tracks.items() if now - track.seen > STALE_SECONDS]:
            del self.tracks[key]  # a version not served for an hour: its scores go too
            for method in ("psi", "ks"):
                with contextlib.suppress(KeyError):
                    self.gauge.remove(*key, method)

    def run(self, stop: threading.Event) -> None:
        """Read, score and export every `interval` until `stop` is set; a failure is said once, never fatal."""
        problem = None
        while True:
            try:
                now = time.time()
                self.poll(now)
                self.export(now)
                if problem:
                    log.info("fleet drift: reading Prometheus works again")
                problem = None
            except Exception as exc:  # noqa: BLE001 - monitoring must never take the controller down
                if str(exc) != problem:
                    log.warning("fleet drift: %s; retrying every %gs", exc, self.settings.interval)
                problem = str(exc)
            if stop.wait(self.settings.interval):
                return

    def _load_kept(self) -> dict[str, dict[str, float]]:
        if self.reference_file is None or not self.reference_file.is_file():
            return {}
        try:
            return json.loads(self.reference_file.read_text())
        except (OSError, ValueError) as exc:
            log.warning("fleet drift: references in %s not read (%s); taking new ones", self.reference_file, exc)
            return {}

    def _save_kept(self) -> None:
        if self.reference_file is None:
            return
        self.reference_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.reference_file.with_suffix(".tmp")
        partial.write_text(json.dumps(self.kept))
        partial.replace(self.reference_file)
