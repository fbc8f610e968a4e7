"""Gateway settings: every setting the HTTP stacks share under its one name (`SERVING_`, `ApiSettings`), plus the
gateway's own, each named in its field's alias (`GATEWAY_...`). A `GATEWAY_` variable that is none of them stops the
gateway at start (`refuse_unknown_names`)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from services.common.errors import ConfigurationError
from services.common.settings import ApiSettings
from services.common.settings_env import env_name, variables
from services.triton.balancer import DEFAULT_POLICY, Policy

OWN_PREFIX = "GATEWAY_"


class GatewaySettings(ApiSettings):
    """`ApiSettings` under their `SERVING_` names, and the Triton connection, the endpoints, the deployment state and
    the admin API under the names their fields give. Fields are also set by name (`GatewaySettings(triton_model=..)`,
    `model_validate`)."""

    model_config = SettingsConfigDict(
        env_prefix="SERVING_",
        env_nested_delimiter="__",
        extra="ignore",
        validate_by_name=True,
        use_attribute_docstrings=True,
    )

    triton_grpc_url: str = Field("127.0.0.1:8001", validation_alias="GATEWAY_TRITON_GRPC_URL")
    """Triton's gRPC address: `HOST:PORT` (one Triton), `IP:PORT,IP:PORT,...` (several replicas) or
    `dns:///NAME:PORT` (every address NAME resolves to: a Kubernetes headless Service). With several replicas each
    worker connects to every one and spreads its calls as `triton_balance` says; a replica that goes away is left out
    within seconds and a call lost with it is sent once more (`services.triton.target`)."""
    grpc_port: int = Field(8081, ge=0, le=65535, validation_alias="GATEWAY_GRPC_PORT")
    """Port of the Open Inference Protocol over gRPC (`inference.GRPCInferenceService`, what `tritonclient.grpc`
    calls; 8081 as KServe's), on `host` beside the HTTP port; every worker serves it (SO_REUSEPORT). 0: no gRPC."""
    triton_balance: Policy = Field(DEFAULT_POLICY, validation_alias="GATEWAY_TRITON_BALANCE")
    """How each worker spreads its calls over several Triton replicas. `least_work`: each call to the replica with
    the fewest sequences sent to it lately, weighted by how slow its calls have been (one 3x slower than the others
    gets none until it recovers); a replica whose calls fail is out of rotation for a growing time (1 s, doubled up
    to 30 s) and probed back, and a call that failed on it is sent once more to another (`services.triton.balancer`).
    `round_robin`: gRPC's own policy, each call to the next ready replica, whatever its size or speed
    (docs/decisions/replica-balance.md)."""
    triton_hedge: bool = Field(True, validation_alias="GATEWAY_TRITON_HEDGE")
    """With `least_work` over several replicas: a call its replica keeps unanswered past twice its size's usual time
    gets a copy on another replica, and the first answer wins (copies at most 5% of the calls), so a replica that
    turned slow holds a batch for that long, not for its whole call. false: every call waits on its one replica."""
    coalesce: bool = True
    """Join each worker's concurrent requests into one tokenizer call and one Triton request (fewer, larger
    requests for Triton; no delay for a lone request). The one setting whose default differs between the stacks:
    `SERVING_COALESCE` is on here, off on the FastAPI stack."""
    triton_model: str = Field("encoder", validation_alias="GATEWAY_TRITON_MODEL")
    """The Triton model the built-in endpoint sends its tensors to."""
    triton_timeout: float = Field(10.0, gt=0, validation_alias="GATEWAY_TRITON_TIMEOUT")
    """Deadline of every Triton call, in seconds."""
    retry_after: float = Field(1.0, gt=0, validation_alias="GATEWAY_RETRY_AFTER")
    """Retry-After (seconds) sent with 503 when Triton is down or its queue is full."""
    buckets: list[int] = Field(default_factory=list, validation_alias="GATEWAY_BUCKETS")
    """Pad token tensors to these lengths (set when Triton batches only equal shapes); empty: pad to the longest."""
    endpoints_file: Path | None = Field(None, validation_alias="GATEWAY_ENDPOINTS_FILE")
    """Endpoint configuration (JSON) edited with `serving endpoints ...`; workers pick up changes without a restart."""
    endpoints_poll_interval: float = Field(1.0, gt=0, validation_alias="GATEWAY_ENDPOINTS_POLL_INTERVAL")
    """How often workers check the endpoint file and the deployment state for changes, in seconds."""
    endpoints_load_timeout: float = Field(60.0, gt=0, validation_alias="GATEWAY_ENDPOINTS_LOAD_TIMEOUT")
    """Seconds one configured endpoint may take to load (its preprocess import, `Preprocess()`, `load()`, its model);
    one that takes longer is left out and named in /health/ready's config_errors (`serving endpoints add` refuses
    it), the others are served. Below gunicorn's 120 s worker timeout, which a worker starting up must also meet."""
    endpoints_retire_after: float = Field(30.0, ge=0, validation_alias="GATEWAY_ENDPOINTS_RETIRE_AFTER")
    """Seconds replaced preprocess instances stay loaded (their requests in flight finish) before unload() runs."""
    serving_base_url: str | None = Field(None, validation_alias="GATEWAY_SERVING_BASE_URL")
    """Where preprocess code's `send_request` sends (clearml-serving's serving base URL); default: this gateway."""
    state_url: str | None = None
    """The shared deployment state of registry-deployed endpoints (`SERVING_STATE_URL`, the controller's too),
    changed by the controller and the admin API; None: no deployed endpoints and no admin API state. `serving up` sets
    the embedded SQLite file; a fleet a PostgreSQL URL (`services.lifecycle.store`)."""
    registry_url: str | None = Field(None, validation_alias="MLFLOW_TRACKING_URI")
    """The registry's tracking server (`MLFLOW_TRACKING_URI`, an http(s) URL of `mlflow server --serve-artifacts`):
    where a gateway on another host than the controller fetches a deployed version's manifest and tokenizer."""
    versions_dir: Path = Field(Path("run") / "gateway" / "versions", validation_alias="GATEWAY_VERSIONS_DIR")
    """Where this gateway keeps the files of deployed versions it fetched from the registry."""
    controller_models_dir: Path = Field(
        Path("run") / "lifecycle" / "models", validation_alias="GATEWAY_CONTROLLER_MODELS_DIR"
    )
    """The controller's models directory (its `CONTROLLER_MODELS_DIR`) where this host can read it (one host, or a
    shared volume): a deployed version's manifest and tokenizer are read from `<dir>/<endpoint>/<version>/model`
    there, else fetched from the registry. Never from a path the deployment state names."""
    versions_from_registry: bool = Field(False, validation_alias="GATEWAY_VERSIONS_FROM_REGISTRY")
    """Fetch every deployed version's files from the registry, even when the controller's copy is readable here
    (`controller_models_dir`): hosts of a fleet that share a machine (the multi-host tests) read no one else's
    files."""
    admin_token: SecretStr | None = Field(None, validation_alias="GATEWAY_ADMIN_TOKEN")
    """Bearer token of the admin API (`/admin/...`); or read from `admin_token_file`. Neither, or a file that does
    not exist: the admin API is off (503). An empty or blank token stops the gateway at start: `Authorization:
    Bearer` with nothing after it would match it."""
    admin_token_file: Path | None = Field(None, validation_alias="GATEWAY_ADMIN_TOKEN_FILE")
    """A file holding the admin token on one line (`serving up` generates one into the run directory, mode 0600). An
    empty, blank or unreadable file stops the gateway at start, saying which file and what to write into it."""
    admin_max_body_bytes: int = Field(64 * 1024, ge=1, validation_alias="GATEWAY_ADMIN_MAX_BODY_BYTES")
    """Admin request bodies above this size are refused with 413 while they arrive, after the token was checked
    (no body is read without it); the largest real one, a canary over many versions, is a few hundred bytes."""


SERVICE_LINKS = re.compile(
    r"GATEWAY_(\w+_)?(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)"
)
"""Kubernetes' service links: what it sets in every pod of a namespace that has a Service named `gateway` or
`gateway-...` (and `GATEWAY_[..._]PORT=tcp://...`)."""


def refuse_unknown_names(environ: Mapping[str, str]) -> None:
    """Stop the start (ConfigurationError, one line) on a name the gateway would not read as its writer meant: a
    `GATEWAY_` variable that is not one of its own settings (a shared setting's says its `SERVING_` name), or the
    `SERVING_` form of one of its own (pydantic-settings reads a field by name beside its alias)."""
    own = {v.name for v in variables(GatewaySettings) if v.name.startswith(OWN_PREFIX)}
    shared = {v.name for v in variables(ApiSettings)}
    prefix = ApiSettings.model_config["env_prefix"]
    by_name = {
        f"{prefix}{field}".upper(): env_name(GatewaySettings, field)
        for field, info in GatewaySettings.model_fields.items()
        if info.validation_alias is not None
    }
    for key in sorted(environ):
        name = key.upper()
        if name in by_name:
            raise ConfigurationError(f"{key} is not a setting: the gateway reads {by_name[name]}")
        if not name.startswith(OWN_PREFIX) or name in own or _service_link(name, environ[key]):
            continue
        if (serving := prefix + name.removeprefix(OWN_PREFIX)) in shared:
            raise ConfigurationError(f"{key} is not a gateway setting: every HTTP stack reads {serving}")
        close = difflib.get_close_matches(name, sorted(own), n=1, cutoff=0.8)
        hint = f"did you mean {close[0]}?" if close else "see the gateway's settings in docs/reference/settings.md"
        raise ConfigurationError(f"{key} is not a gateway setting, nor one the HTTP stacks share: {hint}")


def _service_link(name: str, value: str) -> bool:
    link_port = re.fullmatch(r"GATEWAY_(\w+_)?PORT", name) and value.startswith(("tcp://", "udp://", "sctp://"))
    return bool(SERVICE_LINKS.fullmatch(name) or link_port)
