"""What the controller needs of the parts outside it, as Protocols: the registry (MLflow in production,
`services.registry.mlflow_registry.ModelRegistry`), Triton's model control
(`services.triton.model_control.TritonModels`) and the gateways' per-version metrics. The real adapters satisfy
them structurally (no inheritance); the unit tests drive the controller with fakes of the same shape."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from services.lifecycle.rollouts.windows import Snapshot


class RegistryVersion(Protocol):
    """One registered version: its number and its tags (`deployment=rejected`, `rollout=...`)."""

    @property
    def version(self) -> str: ...

    @property
    def tags(self) -> dict[str, str]: ...


class Registry(Protocol):
    def ping(self) -> None:
        """Raise, naming the registry, unless it answers."""
        ...

    def versions(self, name: str) -> Sequence[RegistryVersion]:
        """Every version of registered model `name`, oldest first."""
        ...

    def fetch(self, name: str, version: str, dest: Path) -> Path:
        """Download the version's artifacts under `dest`; returns the model directory."""
        ...

    def lineage(self, name: str, version: str, model_dir: Path | None = None) -> dict:
        """Where the version came from (run, pipeline, data sets, artifact hashes), kept in the deployment state."""
        ...

    def tag(self, name: str, version: str, tags: dict[str, str]) -> None: ...

    def promote(self, name: str, version: str) -> None:
        """Point the model's champion alias at `version`."""
        ...


class TritonControl(Protocol):
    """Versions of an endpoint's Triton model: placed as version directories, loaded by reloading the model."""

    def placed(self, model: str, version: str) -> bool: ...

    def place(self, model: str, version: str, model_dir: Path) -> None: ...

    def remove(self, model: str, version: str) -> None: ...

    def load(self, model: str) -> None:
        """Reload `model` with the versions now placed; raises Unavailable when Triton does not answer."""
        ...

    def ready(self, model: str, version: str) -> bool: ...

    def wait_ready(self, model: str, version: str) -> None: ...

    def infer(self, model: str, version: str, model_dir: Path, texts: list[str]) -> np.ndarray: ...


class GatewayMetrics(Protocol):
    """The per-version request, error and latency counters of an endpoint summed over every gateway: read from each
    gateway's /metrics, or from Prometheus (`services.controller.gateway_metrics`)."""

    def mark(self, endpoint: str) -> dict:
        """What a window that starts now is measured from: kept in the state as the rollout step's baseline, so that a
        restarted controller judges the same window."""
        ...

    def window(self, endpoint: str, baseline: dict, started: float, now: float) -> Snapshot | None:
        """What `endpoint`'s versions answered from `started` (when `baseline` was marked; wall clock) to `now`, over
        the whole fleet; None when `baseline` is not one this source can measure from (start a fresh window)."""
        ...
