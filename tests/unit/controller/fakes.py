"""In-memory stand-ins for the controller's collaborators, shaped by the Protocols of `services.lifecycle.ports`
(`test_ports` checks that they keep that shape, like the real adapters). Fakes of the project's own seams, for the
unit tier only: the integration tier (`tests/integration/lifecycle`) runs the controller against the real MLflow
registry, the real Triton and the real gateway."""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from observability.metrics import LATENCY_BUCKETS
from services.common.contract import checked_hashes
from services.common.errors import Unavailable
from services.controller.gateway_metrics import FleetMetrics
from services.lifecycle.rollouts.windows import Snapshot, VersionCounters

GATEWAY = "gw-1"


@dataclass
class FakeVersion:
    version: str
    tags: dict[str, str] = field(default_factory=dict)


class FakeRegistry:
    """Registered models as model directories on disk; records what the controller tags and promotes."""

    def __init__(self):
        self.dirs: dict[tuple[str, str], Path] = {}
        self.entries: dict[str, list[FakeVersion]] = {}
        self.champion: dict[str, str] = {}
        self.reachable = True

    def add(self, name: str, model_dir: Path, tags: dict[str, str] | None = None) -> str:
        entries = self.entries.setdefault(name, [])
        version = str(len(entries) + 1)
        entries.append(FakeVersion(version, dict(tags or {})))
        self.dirs[(name, version)] = model_dir
        return version

    def tags(self, name: str, version: str) -> dict[str, str]:
        return next(v.tags for v in self.entries[name] if v.version == version)

    def ping(self) -> None:
        self._check()

    def versions(self, name: str) -> list[FakeVersion]:
        self._check()
        return list(self.entries.get(name, []))

    def fetch(self, name: str, version: str, dest: Path) -> Path:
        self._check()
        target = dest / "model"
        shutil.copytree(self.dirs[(name, version)], target, dirs_exist_ok=True)
        return target

    def lineage(self, name: str, version: str, model_dir: Path | None = None) -> dict:
        lineage: dict = {"registry": {"name": name, "version": version}}
        if model_dir is not None:  # as the real registry records them
            lineage["artifacts"] = checked_hashes(model_dir)
        return lineage

    def tag(self, name: str, version: str, tags: dict[str, str]) -> None:
        self.tags(name, version).update(tags)

    def promote(self, name: str, version: str) -> None:
        self.champion[name] = version

    def _check(self) -> None:
        if not self.reachable:
            raise ConnectionError("registry unreachable")


class FakeTriton:
    """Version directories placed and versions loaded, per model; `up` False: Triton does not answer."""

    def __init__(self, width: int):
        self.width = width
        self.placed_dirs: dict[tuple[str, str], Path] = {}
        self.loaded: set[tuple[str, str]] = set()
        self.up = True
        self.loads = 0
        self.answer: np.ndarray | None = None
        """What `infer` answers instead of a well-formed output, when set."""

    def placed(self, model: str, version: str) -> bool:
        return (model, version) in self.placed_dirs

    def place(self, model: str, version: str, model_dir: Path) -> None:
        self.placed_dirs[(model, version)] = model_dir

    def remove(self, model: str, version: str) -> None:
        self.placed_dirs.pop((model, version), None)

    def load(self, model: str) -> None:
        if not self.up:
            raise Unavailable(f"Triton did not answer the load of '{model}'")
        self.loads += 1
        self.loaded = {k for k in self.loaded if k[0] != model} | {k for k in self.placed_dirs if k[0] == model}

    def ready(self, model: str, version: str) -> bool:
        return self.up and (model, version) in self.loaded

    def wait_ready(self, model: str, version: str) -> None:
        if not self.ready(model, version):
            raise Unavailable(f"version {version} of '{model}' was not ready in Triton")

    def infer(self, model: str, version: str, model_dir: Path, texts: list[str]) -> np.ndarray:
        if not self.ready(model, version):
            raise Unavailable(f"version {version} of '{model}' is not loaded")
        return self.answer if self.answer is not None else np.ones((len(texts), self.width), np.float32)

    def restart(self) -> None:
        """Triton restarted with a freshly rendered repository: no deployed version placed or loaded."""
        self.placed_dirs.clear()
        self.loaded.clear()


class FakeMetrics(FleetMetrics):
    """Each gateway's per-version counters, as the test sets them, windowed as every gateway read over HTTP is
    (`HttpGatewayMetrics`: the same `FleetMetrics` over /metrics text)."""

    def __init__(self):
        self.gateways: dict[str, dict[str, VersionCounters]] = {GATEWAY: {}}
        self.reads = 0
        super().__init__(self._snapshots)

    @property
    def counters(self) -> dict[str, VersionCounters]:
        """The first gateway's counters."""
        return self.gateways[GATEWAY]

    def serve(self, version: str, requests: int, errors: int = 0, seconds: float = 0.01, gateway: str = GATEWAY):
        """`requests` more answered by `version` on `gateway`, `errors` of them 5xx, each taking `seconds`."""
        counters = self.gateways.setdefault(gateway, {}).setdefault(version, VersionCounters())
        counters.requests += requests
        counters.errors += errors
        for bound in ("0.005", "0.01", "0.05", "0.1", "+Inf"):
            if bound == "+Inf" or seconds <= float(bound):
                counters.buckets[bound] = counters.buckets.get(bound, 0.0) + requests

    def observe(self, version: str, latencies, errors: int = 0) -> None:
        """Requests answered by `version` in `latencies` seconds each, `errors` of them 5xx, in the gateway's real
        histogram buckets."""
        counters = self.gateways[GATEWAY].setdefault(version, VersionCounters())
        counters.requests += len(latencies)
        counters.errors += errors
        for bound in (*LATENCY_BUCKETS, math.inf):
            le = "+Inf" if math.isinf(bound) else f"{bound:g}"
            counters.buckets[le] = counters.buckets.get(le, 0.0) + sum(1 for x in latencies if x <= bound)

    def restart(self, gateway: str = GATEWAY) -> None:
        """The gateway restarted: its counters start again from zero."""
        self.gateways[gateway] = {}

    def _snapshots(self, endpoint: str) -> dict[str, Snapshot]:
        self.reads += 1
        return {
            name: Snapshot(versions={v: c.model_copy(deep=True) for v, c in counters.items()})
            for name, counters in self.gateways.items()
        }


class Clock:
    """Time that moves only when a test says so (the wall clock and the monotonic clock alike)."""

    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
