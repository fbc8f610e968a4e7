"""The controller's settings (`CONTROLLER_*`), read once when the controller process starts.

The run directory (`SERVING_RUN_DIR`, default `run`) is a setting like the others: the default paths of the state,
the fetched versions and Triton's repository are under it, and any of them can be set on its own (`serving up`
and the deploy templates set them all)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.settings import default_state_url
from services.triton.control_key import KEY_FILE


class Placement(StrEnum):
    """Who loads the versions the controller checked into Triton (`CONTROLLER_PLACEMENT`), chosen once at start
    (`services.controller.loop.Controller`)."""

    LOCAL = "local"
    """The controller, into its one Triton."""
    AGENTS = "agents"
    """A `serving triton-agent` beside each Triton replica; a version goes live once every replica holds it
    (`services.lifecycle.placement`). The controller touches no Triton."""


class FleetDriftSettings(BaseModel):
    """The fleet's drift monitor (`services.monitoring.fleet_drift`, `CONTROLLER_DRIFT__*`): counts over every worker
    and pod, as Prometheus sums them."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    reference_size: int = Field(500, ge=10)
    """Values the fleet's reference needs when the version brings none (its first requests, fleet-wide)."""
    window_size: int = Field(1000, ge=10)
    """Most recent values (fleet-wide) compared with the reference."""
    min_samples: int = Field(100, ge=10)
    """Values the window needs before a score is exported."""
    interval: float = Field(10.0, gt=0)
    """Seconds between two readings of Prometheus (and two scores)."""


class ControllerSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="CONTROLLER_",
        extra="ignore",
        populate_by_name=True,
        env_nested_delimiter="__",
        use_attribute_docstrings=True,
    )

    run_dir: Path = Field(Path("run"), validation_alias="SERVING_RUN_DIR")
    """The run directory (`SERVING_RUN_DIR`): the default paths below, and the registry's embedded store."""
    state_url: str = Field(
        default_factory=lambda data: default_state_url(data["run_dir"]),
        validation_alias="SERVING_STATE_URL",
    )
    """The shared deployment state (`SERVING_STATE_URL`, one name in every process): `sqlite:///<path>` (default
    `<run_dir>/lifecycle/state.db`, one host) or `postgresql+psycopg2://user[:password]@host:port/db` (a fleet)."""
    models_dir: Path = Field(default_factory=lambda data: data["run_dir"] / "lifecycle" / "models")
    """Where fetched registry versions are kept while deployed."""
    triton_repository: Path = Field(default_factory=lambda data: data["run_dir"] / "triton-repository")
    triton_http_url: str = "http://127.0.0.1:8000"
    triton_control_key_file: Path = Field(default_factory=lambda data: data["run_dir"] / KEY_FILE)
    """The key Triton's model-repository API is restricted to (`services.triton.control_key`); `serving up` writes
    it when it starts Triton."""
    triton_target: str = "local"
    """How versions are placed: local (the wheel's Triton, Python-backend encoder over ONNX Runtime) or container (the
    NGC image's native onnxruntime backend; files copied, not linked, since Triton runs in another container)."""
    triton_gpu: bool = False
    """container: give each deployed version a GPU instance group."""
    gateway_url: str = "http://127.0.0.1:8080"
    """Where rollout windows are read when no Prometheus is set: one gateway's URL or a comma list of every gateway
    host's (each one's /metrics is merged over its workers; the window is their sum)."""
    prometheus_url: str | None = None
    """A Prometheus that scrapes every gateway (e.g. `http://prometheus:9090`): rollout windows and the fleet's drift
    are judged from its sums over every pod and worker."""
    metrics_host: str = "127.0.0.1"
    """Where the controller serves its /metrics."""
    metrics_port: int = Field(9108, ge=1, le=65535)
    """The port of its /metrics (Prometheus' `controller` job): `serving_registry_up`, and with `prometheus_url` the
    fleet's `serving_drift_score`."""
    drift: FleetDriftSettings = FleetDriftSettings()
    interval: float = Field(1.0, gt=0)
    drain_seconds: float = Field(3.0, ge=0)
    """How long a version gets no new traffic before it is unloaded: longer than the gateway's poll interval plus
    its slowest request."""
    log_json: bool = False
    """One JSON object a line (what `serving logs` merges) instead of plain text."""
    max_backoff: float = Field(30.0, gt=0)
    """Longest wait between retries while the registry or Triton is unreachable."""
    placement: Placement = Placement.LOCAL
    """local: the controller places versions into its one Triton; agents: a `serving triton-agent` beside each Triton
    replica places them, and a version goes live once every replica holds it (`Placement`)."""
    forward_timeout: float = Field(120.0, gt=0)
    """Seconds a fetched version's forward pass on the warm-up texts may take (in a child process); past it the
    version is rejected."""
    replica_ttl: float = Field(10.0, gt=0)
    """agents: a replica that has not reported for this long no longer counts (gone, or restarting)."""

    @field_validator("gateway_url")
    @classmethod
    def _gateway_urls(cls, value: str) -> str:
        urls = [url.strip() for url in value.split(",")]
        bad = [url for url in urls if not url.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"CONTROLLER_GATEWAY_URL: {bad[0]!r} is not an http(s) URL (one URL or a comma list)")
        return ",".join(urls)

    @property
    def gateway_urls(self) -> list[str]:
        """Every gateway named by `gateway_url`."""
        return self.gateway_url.split(",")
