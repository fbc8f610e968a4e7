"""The replica agent's settings (`AGENT_*`, plus SERVING_RUN_DIR, SERVING_STATE_URL and the registry's
MLFLOW_TRACKING_URI), read once when `serving triton-agent` starts."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.settings import default_state_url
from services.triton.control_key import KEY_FILE
from services.triton.server import TritonPorts

ANY_ADDRESS = ("0.0.0.0", "::", "")


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AGENT_", extra="ignore", populate_by_name=True, use_attribute_docstrings=True
    )

    run_dir: Path = Field(Path("run"), validation_alias="SERVING_RUN_DIR")
    """This host's run directory: its Triton's repository, the versions it fetched, its Triton's log."""
    state_url: str = Field(
        default_factory=lambda data: default_state_url(data["run_dir"]),
        validation_alias="SERVING_STATE_URL",
    )
    """The shared deployment state (`SERVING_STATE_URL`, the controller's and the gateways' too)."""
    address: str = "127.0.0.1"
    """Where the agent's Triton binds its three ports (another loopback address is another host)."""
    http_port: int = Field(8000, gt=0, lt=65536)
    grpc_port: int = Field(8001, gt=0, lt=65536)
    metrics_port: int = Field(8002, gt=0, lt=65536)
    replica: str | None = None
    """How this replica reports itself to the store; default: the gRPC address the gateways reach it at
    (`address:grpc_port`, the host's name when Triton binds every address)."""
    start_triton: bool = True
    """Start the wheel's tritonserver as the agent's child (and start it again when it dies); false: a Triton
    started by someone else (a container beside the agent) at `triton_http_url`, serving `repository`."""
    triton_http_url: str | None = None
    """Triton's HTTP URL; default: the one the agent's own Triton listens on."""
    triton_control_key_file: Path = Field(default_factory=lambda data: data["run_dir"] / KEY_FILE)
    """The key Triton's model-repository API is restricted to (`services.triton.control_key`): the agent's own Triton
    is started with it (generated there when missing); a Triton started by someone else must have been given it."""
    repository: Path = Field(default_factory=lambda data: data["run_dir"] / "triton-repository")
    models_dir: Path = Field(default_factory=lambda data: data["run_dir"] / "agent" / "models")
    """Where fetched registry versions are kept while this replica holds them."""
    model_dir: Path | None = None
    """A built-in model (an exported directory) rendered into the repository and loaded as `encoder` beside the
    deployed versions, as `serving up STACK=clearml` does; none: the deployed versions only."""
    target: Literal["local", "container"] = "local"
    """How versions are placed (`services.triton.repository.RenderOptions.target`)."""
    gpu: bool = False
    interval: float = Field(1.0, gt=0)
    """Seconds between two syncs with the state (and two reports to it)."""
    max_backoff: float = Field(30.0, gt=0)
    """Longest wait before a version that failed to fetch or load is tried again."""
    ready_timeout: float = Field(180.0, gt=0)
    """How long the agent's Triton may take to load every live version and open its ports."""
    log_json: bool = False

    @model_validator(mode="after")
    def _own_triton_runs_the_local_rendering(self) -> AgentSettings:
        if self.start_triton and self.target != "local":
            raise ValueError(
                "AGENT_TARGET=container needs AGENT_START_TRITON=false: the agent starts the wheel's tritonserver, "
                "which runs the local rendering; start the container's Triton beside the agent instead"
            )
        return self

    @property
    def ports(self) -> TritonPorts:
        return TritonPorts(self.http_port, self.grpc_port, self.metrics_port, address=self.address)

    @property
    def replica_id(self) -> str:
        host = socket.gethostname() if self.address in ANY_ADDRESS else self.address
        return self.replica or f"{host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        local = "127.0.0.1" if self.address in ANY_ADDRESS else self.address
        return self.triton_http_url or f"http://{local}:{self.http_port}"
