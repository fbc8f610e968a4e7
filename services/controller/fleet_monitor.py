"""The fleet's drift monitor (`services.monitoring.fleet_drift`) in the controller process, when the controller has a
Prometheus (`CONTROLLER_PROMETHEUS_URL`): a thread that reads Prometheus every `CONTROLLER_DRIFT__INTERVAL` and puts
its scores into the controller's own metrics (its /metrics, which Prometheus scrapes: `services.controller.process`).

Why here and not in a process of its own: there is one controller per installation, as there must be one judge of the
fleet's drift; it already has the Prometheus URL and the deployment state, whose versions' data-set references
(`drift_reference.json`) it wrote itself; and no extra process, Deployment or Service has to be run. The monitor
shares nothing with the controller's loop but the state store, which it only reads, and its failures are logged and
retried, never raised into the loop."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry

from services.controller.settings import ControllerSettings
from services.lifecycle.model_dirs import artifact_dir
from services.lifecycle.store import DeploymentStore
from services.monitoring.drift import REFERENCE_FILE
from services.monitoring.fleet_counts import FleetFeatureCounts
from services.monitoring.fleet_drift import FleetDrift
from services.prometheus_api import PrometheusApi

log = logging.getLogger("controller")


class DataSetReferences:
    """A deployed version's data-set reference, read once from beside its model in the controller's models directory
    (None: it has none). Found by the endpoint's name and the version (`model_dirs`), never at the state's
    `model_dir`."""

    def __init__(self, store: DeploymentStore, models_dir: Path):
        self.store, self.models_dir = store, Path(models_dir)
        self.found: dict[tuple[str, str], dict | None] = {}

    def __call__(self, endpoint: str, version: str) -> dict | None:
        if (endpoint, version) not in self.found:
            self.found[(endpoint, version)] = self._read(endpoint, version)
        return self.found[(endpoint, version)]

    def _read(self, endpoint: str, version: str) -> dict | None:
        state = self.store.endpoint(endpoint)
        if state is None or version not in state.versions:
            return None
        path = artifact_dir(self.models_dir, endpoint, version) / REFERENCE_FILE
        try:
            return json.loads(path.read_text()) if path.is_file() else None
        except (OSError, ValueError) as exc:
            log.warning("fleet drift: %s not read (%s); the fleet's first values are the reference", path, exc)
            return None


def start_fleet_drift(
    settings: ControllerSettings, store: DeploymentStore, registry: CollectorRegistry
) -> threading.Event | None:
    """Start the monitor's thread, its scores in `registry` (the controller's own metrics), when a Prometheus is
    configured; returns the thread's stop event (None: no Prometheus, each gateway host judges its own traffic,
    `services.monitoring.drift`)."""
    if not settings.prometheus_url:
        return None
    monitor = FleetDrift(
        FleetFeatureCounts(PrometheusApi(settings.prometheus_url)).read,
        settings.drift,
        DataSetReferences(store, settings.models_dir),
        registry,
        settings.run_dir / "lifecycle" / "fleet-drift-references.json",
    )
    stop = threading.Event()
    threading.Thread(target=monitor.run, args=(stop,), name="fleet-drift", daemon=True).start()
    log.info("fleet drift from %s every %gs", settings.prometheus_url, settings.drift.interval)
    return stop
