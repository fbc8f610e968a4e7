"""Typed settings, built once at startup from the environment and passed down.

Each service has its own env prefix; both HTTP stacks read the settings they share (`ApiSettings`) under `SERVING_`.
Nested groups use `__` (e.g. `SERVING_OBSERVABILITY__LOG_JSON=true`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US


class RunSettings(BaseSettings):
    """Where a local stack keeps its pid files, logs, state and stores. Read once by each entry point (the `serving`
    and `loadtest` commands, the controller) and passed down; `serving up` hands it to every process it starts."""

    model_config = SettingsConfigDict(env_prefix="SERVING_", extra="ignore", use_attribute_docstrings=True)

    run_dir: Path = Path("run")
    """The run directory (`SERVING_RUN_DIR`)."""
    state_url: str | None = None
    """The shared deployment state store (`SERVING_STATE_URL`) the stack's gateway and controller use; None: the
    embedded SQLite file under the run directory (`default_state_url`)."""

    @property
    def endpoints_file(self) -> Path:
        """The gateway's endpoint file of this run, the default of `serving up --endpoints-file` and of `serving
        endpoints|metrics --file`: `<run_dir>/endpoints.json`, so runs with different run directories share none."""
        return default_endpoints_file(self.run_dir)


def default_endpoints_file(run_dir: Path) -> Path:
    """The endpoint file of a run directory: `<run_dir>/endpoints.json`."""
    return Path(run_dir) / "endpoints.json"


def unread_endpoints_file(run_dir: Path) -> str | None:
    """A note when the shell's directory holds an `endpoints.json`, the default of earlier versions, and the run
    directory none: it is not read any more, and the note says how to keep its endpoints."""
    old, new = Path("endpoints.json"), default_endpoints_file(run_dir)
    if not old.is_file() or new.exists() or old.resolve() == new.resolve():
        return None
    return (
        f"note: ./endpoints.json is not read: the endpoint file is now the run directory's, {new}; "
        f"to keep its endpoints, `mv endpoints.json {new}` (or name it: --file / --endpoints-file endpoints.json)"
    )


def default_state_url(run_dir: Path) -> str:
    """The embedded deployment state store of a run directory: SQLite, `<run_dir>/lifecycle/state.db`."""
    return f"sqlite:///{(Path(run_dir) / 'lifecycle' / 'state.db').resolve()}"


class ObservabilitySettings(BaseModel):
    """Logs and traces (`SERVING_OBSERVABILITY__*`)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    log_level: str = "INFO"
    """Root log level."""
    log_json: bool = False
    """One JSON object per log line (with request_id and trace_id) instead of plain text."""
    tracing: bool = False
    """Export OpenTelemetry spans over OTLP/HTTP. Off costs nothing: the API's no-op tracer is used."""
    otlp_endpoint: str = "http://127.0.0.1:4318/v1/traces"
    """OTLP/HTTP traces endpoint (an OpenTelemetry collector, Jaeger, Tempo...)."""
    sampling_ratio: float = Field(1.0, ge=0.0, le=1.0)
    """Fraction of new traces sampled; a sampled incoming `traceparent` is always followed."""


class LogSettings(BaseSettings):
    """The observability group alone, read as `ApiSettings` reads it (`SERVING_OBSERVABILITY__LOG_JSON=yes`, or the
    whole group as JSON): what gunicorn's configuration needs before any app exists."""

    model_config = SettingsConfigDict(env_prefix="SERVING_", env_nested_delimiter="__", extra="ignore")

    observability: ObservabilitySettings = ObservabilitySettings()


class DriftSettings(BaseModel):
    """Drift detection on one host (`services.monitoring.drift`, `SERVING_MONITORING__*`): one judge over every
    worker's values merged."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    reference_size: int = Field(500, ge=10)
    """Values (the host's, all workers together) taken as the reference when the version brings none: its first
    requests'."""
    window_size: int = Field(1000, ge=10)
    """Most recent values (all workers together) compared with the reference."""
    min_samples: int = Field(100, ge=10)
    """Values the window needs before a score is exported."""
    interval: float = Field(10.0, gt=0)
    """Seconds between two readings of the workers' counts (and two scores)."""
    worker_scores: bool = True
    """This host's workers judge drift (one of them, on all their values merged). Off
    (`SERVING_MONITORING__WORKER_SCORES=false`) where the controller's fleet monitor judges every host's values
    merged (`CONTROLLER_PROMETHEUS_URL` set)."""


class ApiSettings(BaseSettings):
    """What every HTTP serving stack (FastAPI baseline, gateway) shares."""

    model_config = SettingsConfigDict(
        env_prefix="SERVING_", env_nested_delimiter="__", extra="ignore", use_attribute_docstrings=True
    )

    model_dir: Path = Path("build/model")
    """Exported model directory (model.onnx, tokenizer.json, manifest.json), written by `serving model build`."""
    endpoint: str | None = None
    """Endpoint name in `/serve/{endpoint}`; default: the model's short name (`minilm` for all-MiniLM-L6-v2, else
    the model's name in lower case)."""
    host: str = "0.0.0.0"
    port: int = 8080
    workers: int = Field(1, ge=1)
    """gunicorn worker processes."""
    max_body_bytes: int = Field(1 << 20, ge=1)
    """Request bodies above this size are rejected with 413."""
    max_texts: int = Field(64, ge=1)
    """Most texts one request may carry (413 above)."""
    truncate: bool = True
    """Truncate over-long texts to the model's maximum length (and say so); false rejects them with 422."""
    coalesce: bool = False
    """Join this worker's concurrent predictions of one model into one tokenizer call and one backend call
    (`services.api.coalesce`); the gateway turns it on by default."""
    coalesce_max_texts: int = Field(64, ge=1)
    """Texts in one coalesced batch at most (Triton's encoder takes 64 a request)."""
    coalesce_depth: int = Field(1, ge=1)
    """Coalesced batches in flight at once per worker and model; requests arriving meanwhile join the next. One keeps
    a worker's batches large while several workers keep the backend fed (docs/decisions/coalesce-depth.md)."""
    max_inflight: int = Field(64, ge=1)
    """Requests one worker handles at once; past it new requests get 429 with Retry-After."""
    intra_op_threads: int | None = Field(None, ge=1)
    """ONNX Runtime threads per worker; default: CPU cores divided by workers."""
    device: Literal["cpu", "cuda", "sim"] = "cpu"
    """Where the in-process model runs (STACK=fastapi): ONNX Runtime on the CPU, on an NVIDIA GPU (`cuda`: its CUDA
    provider; refused at start where there is none), or `sim`, the simulated accelerator
    (`services.common.sim_device`: one device, each batch `sim_fixed_us + sim_per_token_us x padded tokens` of
    waiting, deterministic unit-norm outputs)."""
    sim_fixed_us: float = Field(DEFAULT_FIXED_US, ge=0)
    """`device=sim`: device time of every batch, in microseconds."""
    sim_per_token_us: float = Field(DEFAULT_PER_TOKEN_US, ge=0)
    """`device=sim`: device time of every padded token of a batch, in microseconds."""
    sim_lock_file: Path | None = None
    """`device=sim`: the file whose lock is the device, shared by every worker that opens it (`serving up` sets one
    in the run directory); None: each worker has a device of its own."""
    api_keys: list[SecretStr] = Field(default_factory=list)
    """API keys for /serve, /v1 and /v2 (`Authorization: Bearer KEY`); none and no keys file: inference is open. An
    empty or blank key in the list stops the service at start."""
    api_keys_file: Path | None = None
    """A file of API keys, one a line (# comments allowed). A file that is missing, cannot be read or holds no key
    stops the service at start: a keys file asks for keys, so it never leaves inference open."""
    protect_metrics: bool = False
    """Ask for an API key on /metrics too (health stays open for probes)."""
    observability: ObservabilitySettings = ObservabilitySettings()
    monitoring: DriftSettings = DriftSettings()
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    """Request line and headers together above this size get 431 and the connection is closed, before the parser
    has spent more than this on them (`services.api.http_limits`)."""
    read_timeout: float = Field(10.0, gt=0)
    """Seconds a request may take to arrive in full (request line, headers and body), counted from its first byte;
    past it 408 and the connection is closed (`services.api.http_limits`)."""
    max_reading: int = Field(256, ge=1)
    """Inference requests one worker lets send their bodies at once; past it new ones get 503 with Retry-After. A
    request counts toward `max_inflight` only once its body has arrived (`services.api.admission`)."""
    max_concurrent_tokens: int = Field(32768, ge=1)
    """Tokens one worker works on at once (texts x the longest text's tokens, padding included), as TEI's token
    budget; a request waits for its share (`token_wait`), then gets 429; one over the whole budget gets 413. The
    default lets one request of 64 texts of 256 tokens (the real model at its limits) run when the worker has nothing
    else, and as much again in smaller requests beside it (`services.api.budget`)."""
    token_wait: float = Field(5.0, gt=0)
    """Seconds a request may wait for its share of the token budget before 429 with Retry-After."""
    max_batch_tokens: int = Field(2048, ge=1)
    """Padded tokens in one backend call at most: a request over it runs in several, one after the other (the others'
    calls in between), and one of over half of it is not coalesced (`services.api.predictor`). 2048 is 8 texts of the
    real model's 256 tokens, which answer as many texts a second as 16 a call (docs/decisions/measured-defaults.md)."""
    request_timeout: float = Field(60.0, gt=0)
    """Seconds a request may take in the server, unless the caller's `x-request-timeout` header asks for less; past
    it, 504 and its work is dropped (`services.api.lifetime`)."""
    completion_log_sample: float = Field(0.1, ge=0.0, le=1.0)
    """Share of successful inference requests that write their completion line (`services.api.edge`); errors
    (status >= 400) write theirs up to `error_log_burst`; 1 makes every 2xx findable by `serving logs --request-id`
    (docs/decisions/completion-lines.md)."""
    error_log_burst: int = Field(20, ge=1)
    """Lines of one kind of error (a route and a status: 404 on /serve, 431, ...) a worker writes per
    `error_log_interval`; past it they are counted, and one line says how many were left out
    (`observability.repeats`): a client repeating a bad request cannot fill the disk with its lines."""
    error_log_interval: float = Field(60.0, gt=0)
    """Seconds over which `error_log_burst` counts."""

    @field_validator("model_dir")
    @classmethod
    def _expand_model_dir(cls, model_dir: Path) -> Path:
        return model_dir.expanduser()
