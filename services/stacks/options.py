"""What `serving up` was asked for: the stack, its ports and directories, its logging, tracing and tuning."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US
from services.common.settings import default_endpoints_file
from services.stacks.tuning import Tuning
from services.triton.server import TritonPorts

STACKS = ("fastapi", "triton", "clearml")


@dataclass(frozen=True)
class StackOptions:
    stack: str = "clearml"
    """fastapi | triton | clearml (the gateway, `make up`'s default)."""
    workers: int = 1
    batching: bool = True
    host: str = "0.0.0.0"
    port: int = 8080
    model_dir: Path = Path("build/model")
    run_dir: Path = Path("run")
    """Where pid files, logs, state and stores go; `serving up` passes `RunSettings().run_dir` (SERVING_RUN_DIR)."""
    state_url: str | None = None
    """The deployment state store of the gateway and the controller (`SERVING_STATE_URL`); None: the embedded SQLite
    file `<run_dir>/lifecycle/state.db`."""
    triton_ports: TritonPorts = TritonPorts()
    controller_metrics_port: int = 9108
    """clearml: the controller's /metrics (`serving_registry_up`), what Prometheus' `controller` job scrapes."""
    grpc_port: int | None = None
    """clearml: the gateway's Open Inference Protocol over gRPC, claimed like the other ports; None: the gateway's
    own setting decides (`GATEWAY_GRPC_PORT`, 8081) and the port is not claimed before the start: a stack started
    with every other port free (the load tests') still starts beside one that holds it (docs/decisions/grpc-edge.md)."""
    padding: str = "ragged"
    endpoints_file: Path | None = None
    """clearml: the gateway's endpoint file as given; None: the run directory's (`endpoints_path`)."""
    endpoint: str | None = None
    """Name of the built-in endpoint (`/serve/{endpoint}`); None: the model's (`Manifest.endpoint_name`)."""
    log_json: bool = False
    """Every process writes JSON lines (into the run's log directory when detached): `serving logs` merges them."""
    otlp_endpoint: str | None = None
    """Trace every service of the stack to this OTLP/HTTP traces URL (any collector); None: see `traces`."""
    traces: bool = False
    """Trace every service into the stack's own receiver (spans in <run_dir>/traces/spans.db, for `serving
    analyze`)."""
    trace_port: int = 4318
    trace_ratio: float = 1.0
    """Share of requests that arrive without a trace context to trace (a caller's `traceparent` decides for its
    own requests: parent-based sampling in every service, Triton included)."""

    device: str = "cpu"
    """Where the encoder runs: cpu (ONNX Runtime) or sim, the simulated accelerator in the encoder's place (Triton's
    encoder model, the FastAPI workers' in-process runner: `services.common.sim_device`), one device per stack."""
    sim_fixed_us: float = DEFAULT_FIXED_US
    """device=sim: device time of every batch, microseconds."""
    sim_per_token_us: float = DEFAULT_PER_TOKEN_US
    """device=sim: device time of every padded token of a batch, microseconds."""

    via_make: bool = False
    """Started by `make up` (its recipe sets SERVING_VIA_MAKE=1): a message names make's knobs (`PORT=8082`) where it
    has one, not `serving up`'s options (`--port 8082`)."""

    tuning: Tuning = Tuning()
    """Knobs past the defaults (`Tuning`). `loadtest tune` searches most of them (`loadtest.tune.SPACES`);
    `serving up --triton-max-queue/--spin` sets the other two."""

    @property
    def endpoints_path(self) -> Path:
        """The gateway's endpoint file: `endpoints_file`, else `<run_dir>/endpoints.json`, so that two runs with
        different run directories share none."""
        return self.endpoints_file or default_endpoints_file(self.run_dir)

    @property
    def tracing_url(self) -> str | None:
        """Where every service exports its spans: `otlp_endpoint`, else the stack's own receiver, else None."""
        if self.otlp_endpoint:
            return self.otlp_endpoint
        return f"http://127.0.0.1:{self.trace_port}/v1/traces" if self.traces else None

    @property
    def sim_lock_file(self) -> Path:
        """The simulated device of the stack: the lock file every process running the encoder shares."""
        return (self.run_dir / "sim-device.lock").resolve()

    def to_json(self) -> str:
        """The options as JSON, for the detached supervisor (`serving supervise`) to start the same stack."""
        return json.dumps(asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> StackOptions:
        """What `to_json` wrote."""
        data = json.loads(text)
        paths = {f.name for f in fields(cls) if f.type in ("Path", "Path | None")}
        data = {key: Path(value) if key in paths and value is not None else value for key, value in data.items()}
        return cls(
            **(data | {"triton_ports": TritonPorts(**data["triton_ports"]), "tuning": Tuning.of(data["tuning"])})
        )
