"""The controller's settings (`CONTROLLER_*`), read once when the controller process starts.

The run directory (`SERVING_RUN_DIR`, default `run`) is a setting like the others: the default paths of the state,
the fetched versions and Triton's repository are under it, and any of them can be set on its own (`serving up`
and the deploy templates set them all)."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ControllerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CONTROLLER_", extra="ignore", populate_by_name=True)

    run_dir: Path = Field(Path("run"), validation_alias=AliasChoices("SERVING_RUN_DIR", "run_dir"))
    """The run directory (`SERVING_RUN_DIR`): the default paths below, and the registry's embedded store."""
    deployments_file: Path = Field(default_factory=lambda data: data["run_dir"] / "lifecycle" / "deployments.json")
    models_dir: Path = Field(default_factory=lambda data: data["run_dir"] / "lifecycle" / "models")
    """Where fetched registry versions are kept while deployed."""
    triton_repository: Path = Field(default_factory=lambda data: data["run_dir"] / "triton-repository")
    triton_http_url: str = "http://127.0.0.1:8000"
    triton_target: str = "local"
    """How versions are placed: local (the wheel's Triton, Python-backend encoder over ONNX Runtime) or container (the
    NGC image's native onnxruntime backend; files copied, not linked, since Triton runs in another container)."""
    triton_gpu: bool = False
    """container: give each deployed version a GPU instance group."""
    gateway_url: str = "http://127.0.0.1:8080"
    """Where the gateway's /metrics are read for rollout decisions."""
    interval: float = Field(1.0, gt=0)
    drain_seconds: float = Field(3.0, ge=0)
    """How long a version gets no new traffic before it is unloaded: longer than the gateway's poll interval plus
    its slowest request."""
    log_json: bool = False
    """One JSON object a line (what `serving logs` merges) instead of plain text."""
    max_backoff: float = Field(30.0, gt=0)
    """Longest wait between retries while the registry or Triton is unreachable."""
