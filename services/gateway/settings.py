"""Gateway settings (env prefix `GATEWAY_`): everything the HTTP stacks share, plus the Triton connection."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import SettingsConfigDict

from services.common.settings import ApiSettings


class GatewaySettings(ApiSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", env_nested_delimiter="__", extra="ignore")

    triton_grpc_url: str = "127.0.0.1:8001"
    """Triton's gRPC address: `HOST:PORT` (one Triton), `IP:PORT,IP:PORT,...` (several replicas) or
    `dns:///NAME:PORT` (every address NAME resolves to: a Kubernetes headless Service). With several replicas each
    worker connects to every one and sends each call to the next (gRPC's round_robin); a replica that goes away is
    left out within seconds and a call lost with it is sent once more (`services.triton.target`)."""
    coalesce: bool = True
    """Join each worker's concurrent requests into one tokenizer call and one Triton request (fewer, larger
    requests for Triton; no delay for a lone request)."""
    triton_model: str = "encoder"
    """The Triton model the built-in endpoint sends its tensors to."""
    triton_timeout: float = Field(10.0, gt=0)
    """Deadline of every Triton call, in seconds."""
    retry_after: float = Field(1.0, gt=0)
    """Retry-After (seconds) sent with 503 when Triton is down or its queue is full."""
    buckets: list[int] = Field(default_factory=list)
    """Pad token tensors to these lengths (set when Triton batches only equal shapes); empty: pad to the longest."""
    endpoints_file: Path | None = None
    """Endpoint configuration (JSON) edited with `serving endpoints ...`; workers pick up changes without a restart."""
    endpoints_poll_interval: float = Field(1.0, gt=0)
    """How often workers check the endpoint file and the deployment state for changes, in seconds."""
    endpoints_load_timeout: float = Field(60.0, gt=0)
    """Seconds one configured endpoint may take to load (its preprocess import, `Preprocess()`, `load()`, its model);
    one that takes longer is left out and named in /health/ready's config_errors (`serving endpoints add` refuses
    it), the others are served. Below gunicorn's 120 s worker timeout, which a worker starting up must also meet."""
    endpoints_retire_after: float = Field(30.0, ge=0)
    """Seconds replaced preprocess instances stay loaded (their requests in flight finish) before unload() runs."""
    serving_base_url: str | None = None
    """Where preprocess code's `send_request` sends (clearml-serving's serving base URL); default: this gateway."""
    state_url: str | None = Field(None, validation_alias=AliasChoices("SERVING_STATE_URL", "state_url"))
    """The shared deployment state of registry-deployed endpoints (`SERVING_STATE_URL`, the controller's too),
    changed by the controller and the admin API; None: no deployed endpoints and no admin API state. `serving up` sets
    the embedded SQLite file; a fleet a PostgreSQL URL (`services.lifecycle.state`)."""
    registry_url: str | None = Field(None, validation_alias=AliasChoices("MLFLOW_TRACKING_URI", "registry_url"))
    """The registry's tracking server (`MLFLOW_TRACKING_URI`, an http(s) URL of `mlflow server --serve-artifacts`):
    where a gateway on another host than the controller fetches a deployed version's manifest and tokenizer."""
    versions_dir: Path = Path("run") / "gateway" / "versions"
    """Where this gateway keeps the files of deployed versions it fetched from the registry."""
    versions_from_registry: bool = False
    """Fetch every deployed version's files from the registry, even when the state's `model_dir` (the controller's
    copy) is readable here: hosts of a fleet that share a machine (the multi-host tests) read no one else's files."""
    admin_token: SecretStr | None = None
    """Bearer token of the admin API (`/admin/...`); or read from `admin_token_file`. Neither, or a file that does
    not exist: the admin API is off (503). An empty or blank token stops the gateway at start: `Authorization:
    Bearer` with nothing after it would match it."""
    admin_token_file: Path | None = None
    """A file holding the admin token on one line (`serving up` generates one into the run directory, mode 0600). An
    empty, blank or unreadable file stops the gateway at start, saying which file and what to write into it."""
    admin_max_body_bytes: int = Field(64 * 1024, ge=1)
    """Admin request bodies above this size are refused with 413 while they arrive, after the token was checked
    (no body is read without it); the largest real one, a canary over many versions, is a few hundred bytes."""
