"""Drift detection on one host: each endpoint version's live traffic, merged over every worker of the host, compared
with its reference distribution, by one judge.

The judge is whichever worker holds the lock `JUDGE_LOCK` in the workers' metrics directory (`PROMETHEUS_MULTIPROC_DIR`;
the first worker to ask, the next one once it exits; a process without that directory is a host of its own). Every
`interval` seconds it reads what every worker binned (`host_counts`: the histograms and counters of token length,
embedding norm, top score, predicted label and declared scalar and enum variables that `/metrics` exports anyway) and
scores it as the fleet's monitor scores Prometheus' sums (`fleet_drift.FleetDrift`):
- the reference is the data set logged with the registered version (`drift_reference.json` beside the version's
  model, written by the controller), binned into the same bins, else the host's first `reference_size` values (kept
  in `REFERENCES_FILE` beside the lock, so that a new judge keeps the reference the workers' counters started with);
- the window is the latest `window_size` values or more, from the latest reading that leaves that many;
- with `min_samples` values in both, the Population Stability Index (every feature) and, for continuous features, the
  Kolmogorov-Smirnov distance between the binned distributions are exported as
  `serving_drift_score{endpoint,version,feature,method}`: one series per endpoint version, feature and method, as
  only the judge sets it.
PSI reads: < 0.1 no shift, 0.1-0.25 moderate, > 0.25 significant (the alert threshold in
observability/prometheus/rules.yml). A fleet whose controller has a Prometheus judges every host's data merged
instead (`services.controller.fleet_monitor`): its gateways set `worker_scores` off
(`SERVING_MONITORING__WORKER_SCORES=false`) and no worker judges.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

from prometheus_client import Gauge

from services.common.settings import DriftSettings
from services.monitoring.fleet_drift import FleetDrift
from services.monitoring.host_counts import HostFeatureCounts, Sample, merged_samples

log = logging.getLogger(__name__)
REFERENCE_FILE = "drift_reference.json"
JUDGE_LOCK = "drift-judge.lock"
"""Held by the worker that judges the host's drift; it holds that worker's pid."""
REFERENCES_FILE = "drift-references.json"
"""The references the judge took from the host's first values, for the next judge."""

DRIFT = Gauge(
    "serving_drift_score",
    "Distance of the host's live traffic (every worker) from the version's reference (psi: Population Stability "
    "Index; ks: Kolmogorov-Smirnov distance of the binned distributions)",
    ["endpoint", "version", "feature", "method"],
    multiprocess_mode="livemax",
)


class DriftMonitor:
    """One per worker; the one that holds the host's judge lock scores every worker's traffic (module docstring)."""

    def __init__(
        self,
        settings: DriftSettings | None = None,
        directory: Path | None = None,
        samples: Callable[[], Iterable[Sample]] = merged_samples,
    ):
        """`directory`: where the workers' metric files, the lock and the kept references are; default the
        `PROMETHEUS_MULTIPROC_DIR` of the process, None without one (this process alone is the host). `samples`:
        what the host exports, merged over its workers."""
        self.settings = settings or DriftSettings()
        self.samples = samples
        multiproc = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        self.directory = directory or (Path(multiproc) if multiproc else None)
        self.references: dict[tuple[str, str], dict] = {}
        self.judge: FleetDrift | None = None
        self._lock: TextIO | None = None
        self._task: asyncio.Task | None = None

    def load_reference(self, endpoint: str, version: str, model_dir: Path) -> bool:
        """The data-set reference the controller wrote beside a deployed version, if any."""
        path = Path(model_dir) / REFERENCE_FILE
        if not path.is_file():
            return False
        self.references[(endpoint, version)] = json.loads(path.read_text())
        return True

    def judging(self) -> bool:
        """Whether this worker judges: it does once it holds the lock, which it takes when no live worker holds it."""
        if self.judge is not None:
            return True
        if self.directory is not None and not self._take_lock(self.directory):
            return False
        self.judge = FleetDrift(
            HostFeatureCounts(self.samples).read,
            self.settings,
            lambda endpoint, version: self.references.get((endpoint, version)),
            reference_file=self.directory / REFERENCES_FILE if self.directory else None,
            gauge=DRIFT,
        )
        log.info("this worker judges the host's drift (pid %d)", os.getpid())
        return True

    def _take_lock(self, directory: Path) -> bool:
        handle = open(directory / JUDGE_LOCK, "a+")  # noqa: SIM115 - held open while this worker judges
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock = handle
        return True

    def judge_once(self, now: float) -> None:
        """Read the host's counts and export the scores, if this worker judges."""
        if self.judging() and self.judge is not None:
            self.judge.poll(now)
            self.judge.export(now)

    async def start(self) -> None:
        if not self.settings.worker_scores:
            return

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.settings.interval)
                try:
                    await asyncio.to_thread(self.judge_once, time.time())
                except Exception:  # noqa: BLE001 - monitoring must never take serving down
                    log.exception("drift computation failed")

        self._task = asyncio.get_running_loop().create_task(loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        if self._lock:
            self._lock.close()  # the next worker to ask judges
            self._lock = None
