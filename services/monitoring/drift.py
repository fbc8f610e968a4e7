"""Drift detection: each endpoint version's live traffic compared with its reference distribution.

Per feature (token length, embedding norm, top score, predicted label, declared scalar and enum variables):
- the reference comes from the data set logged with the registered version when the controller could compute it
  (`drift_reference.json` beside the version's model), otherwise from the version's first `reference_size` values;
- a sliding window keeps the last `window_size` values (memory bounded per feature);
- every `interval` seconds, with at least `min_samples` values in the window, the Population Stability Index (every
  feature; bins at the reference's deciles) and, for continuous features, the two-sample Kolmogorov-Smirnov statistic
  (scipy) are exported as `serving_drift_score{endpoint,version,feature,method}`.

PSI reads: < 0.1 no shift, 0.1-0.25 moderate, > 0.25 significant (the alert threshold in
observability/prometheus/rules.yml). Each worker process judges its own share of the traffic; the exported score is
the largest over the live workers. That is for a single process or host: with many workers each needs its own traffic
and raises its own false alarms. A fleet judges drift on every worker's data merged instead (`fleet_drift`, run by the
controller when it has a Prometheus): its gateways then set `worker_scores` off (`GATEWAY_MONITORING__WORKER_SCORES=
false`), and this monitor keeps nothing and exports no score.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from prometheus_client import Gauge

from services.common.settings import DriftSettings

log = logging.getLogger(__name__)
REFERENCE_FILE = "drift_reference.json"
EPSILON = 1e-4

DRIFT = Gauge(
    "serving_drift_score",
    "Distance of live traffic from the version's reference distribution (psi: Population Stability Index; "
    "ks: two-sample Kolmogorov-Smirnov statistic)",
    ["endpoint", "version", "feature", "method"],
    multiprocess_mode="livemax",
)


def psi_continuous(reference: np.ndarray, window: np.ndarray, bins: int) -> float:
    edges = np.unique(np.quantile(reference, np.linspace(0, 1, bins + 1)[1:-1]))
    expected = np.bincount(np.searchsorted(edges, reference, side="right"), minlength=len(edges) + 1)
    actual = np.bincount(np.searchsorted(edges, window, side="right"), minlength=len(edges) + 1)
    return psi_of_shares(expected / expected.sum(), actual / actual.sum())


def psi_categorical(reference: list, window: list) -> float:
    categories = sorted(set(reference) | set(window), key=str)
    expected, actual = Counter(reference), Counter(window)
    e = np.array([expected[c] for c in categories], dtype=float)
    a = np.array([actual[c] for c in categories], dtype=float)
    return psi_of_shares(e / e.sum(), a / a.sum())


def psi_of_shares(expected: np.ndarray, actual: np.ndarray) -> float:
    """PSI of two distributions given as shares of the same bins (each summing to 1)."""
    expected, actual = np.clip(expected, EPSILON, None), np.clip(actual, EPSILON, None)
    return float(np.sum((actual - expected) * np.log(actual / expected)))


def ks_statistic(reference: np.ndarray, window: np.ndarray) -> float:
    from scipy.stats import ks_2samp

    return float(ks_2samp(reference, window).statistic)


@dataclass
class Feature:
    categorical: bool
    reference: list = field(default_factory=list)
    reference_fixed: bool = False
    """True when the reference came from the data set: it never grows from live traffic."""
    window: deque = field(default_factory=deque)
    seen: float = field(default_factory=time.monotonic)


class DriftMonitor:
    def __init__(self, settings: DriftSettings | None = None):
        self.settings = settings or DriftSettings()
        self.features: dict[tuple[str, str, str], Feature] = {}
        self._task: asyncio.Task | None = None

    def _feature(self, endpoint: str, version: str, name: str, categorical: bool) -> Feature:
        key = (endpoint, version, name)
        feature = self.features.get(key)
        if feature is None:
            feature = self.features[key] = Feature(categorical, window=deque(maxlen=self.settings.window_size))
        return feature

    def set_reference(self, endpoint: str, version: str, name: str, values: list, categorical: bool) -> None:
        feature = self._feature(endpoint, version, name, categorical)
        feature.reference, feature.reference_fixed = list(values)[: 20 * self.settings.reference_size], True

    def load_reference(self, endpoint: str, version: str, model_dir: Path) -> bool:
        """The data-set reference the controller wrote beside a deployed version, if any."""
        path = Path(model_dir) / REFERENCE_FILE
        if not path.is_file():
            return False
        for name, spec in json.loads(path.read_text()).items():
            self.set_reference(endpoint, version, name, spec["values"], spec.get("categorical", False))
        return True

    def observe(self, endpoint: str, version: str, name: str, values, categorical: bool = False) -> None:
        if not self.settings.worker_scores:
            return
        feature = self._feature(endpoint, version, name, categorical)
        feature.seen = time.monotonic()
        for value in values:
            if not feature.reference_fixed and len(feature.reference) < self.settings.reference_size:
                feature.reference.append(value)
            else:
                feature.window.append(value)

    def scores(self) -> dict[tuple[str, str, str, str], float]:
        result = {}
        for (endpoint, version, name), feature in list(self.features.items()):
            if len(feature.window) < self.settings.min_samples or len(feature.reference) < self.settings.min_samples:
                continue
            window = list(feature.window)
            if feature.categorical:
                result[(endpoint, version, name, "psi")] = psi_categorical(feature.reference, window)
            else:
                reference, live = np.asarray(feature.reference, float), np.asarray(window, float)
                result[(endpoint, version, name, "psi")] = psi_continuous(reference, live, self.settings.bins)
                result[(endpoint, version, name, "ks")] = ks_statistic(reference, live)
        return result

    def export(self) -> None:
        for (endpoint, version, name, method), score in self.scores().items():
            if math.isfinite(score):
                DRIFT.labels(endpoint, version, name, method).set(round(score, 6))
        stale = [key for key, feature in self.features.items() if time.monotonic() - feature.seen > 3600]
        for key in stale:  # versions not served for an hour: free their windows
            del self.features[key]

    async def start(self) -> None:
        if not self.settings.worker_scores:
            return
        # scipy's first import takes ~0.5 s of CPU: paid at start-up, not by the requests around the first export
        await asyncio.to_thread(importlib.import_module, "scipy.stats")

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.settings.interval)
                try:
                    await asyncio.to_thread(self.export)
                except Exception:  # noqa: BLE001 - monitoring must never take serving down
                    log.exception("drift computation failed")

        self._task = asyncio.get_running_loop().create_task(loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
