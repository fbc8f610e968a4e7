"""STACK=clearml: Triton serves the encoder alone; the gateway's workers tokenize and call it over gRPC; the
lifecycle controller deploys registry versions into the same Triton."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from services.common.contract import Manifest
from services.common.errors import ConfigurationError
from services.common.private import ensure_secret, narrow, private_dir
from services.common.settings import default_state_url
from services.common.tokenization import default_buckets
from services.gateway.settings import GatewaySettings, refuse_unknown_names
from services.launcher import ProcessSpec
from services.stacks.http_service import http_service
from services.stacks.options import StackOptions
from services.stacks.triton_service import triton_service

ADMIN_TOKEN_FILE = "admin-token"
SQLITE = "sqlite:///"


def clearml_processes(options: StackOptions) -> list[ProcessSpec]:
    """Triton, then the gateway, then the controller: each needs the one before it to be ready. The lifecycle
    directory (the embedded deployment state, the controller's copies of versions) is private to its owner."""
    lifecycle = private_dir((options.run_dir / "lifecycle").resolve())
    if (url := state_url(options)).startswith(SQLITE):
        narrow(Path(url.removeprefix(SQLITE)))  # a state file an older run left readable by others
    return [
        triton_service(options, models=["encoder"]),
        gateway_process(options),
        controller_process(options, lifecycle),
    ]


def gateway_process(options: StackOptions) -> ProcessSpec:
    """The gateway (`services.gateway.app`): Triton's gRPC port, the endpoint file, the deployment state store the
    controller shares, the admin token; with bucket padding, the buckets its tokenizer pads to. A `GATEWAY_` name in
    this environment that the gateway would not read stops the start here, before any process starts."""
    refuse_unknown_names(os.environ)
    values = {
        "triton_grpc_url": f"127.0.0.1:{options.triton_ports.grpc}",
        "endpoints_file": options.endpoints_path.resolve(),
        "state_url": state_url(options),
        "versions_dir": (options.run_dir / "gateway" / "versions").resolve(),
        "controller_models_dir": (options.run_dir / "lifecycle" / "models").resolve(),
        "admin_token_file": ensure_admin_token(options.run_dir).resolve(),
    }
    if options.padding == "bucket":
        values["buckets"] = default_buckets(Manifest.load(options.model_dir).max_seq_length)
    if options.grpc_port is not None:
        values["grpc_port"] = options.grpc_port
    spec = http_service(
        options, name="gateway", app="services.gateway.app:create_app()", settings=GatewaySettings, values=values
    )
    if options.grpc_port:
        spec.ports.append(options.grpc_port)
    return spec


def controller_process(options: StackOptions, lifecycle: Path) -> ProcessSpec:
    """The lifecycle controller: registry versions into Triton, drains, rollouts (`services.controller`); its
    /metrics on 127.0.0.1."""
    env = {
        "SERVING_RUN_DIR": str(options.run_dir.resolve()),
        "SERVING_STATE_URL": state_url(options),
        "CONTROLLER_MODELS_DIR": str(lifecycle / "models"),
        "CONTROLLER_TRITON_REPOSITORY": str((options.run_dir / "triton-repository").resolve()),
        "CONTROLLER_TRITON_HTTP_URL": f"http://127.0.0.1:{options.triton_ports.http}",
        "CONTROLLER_GATEWAY_URL": f"http://127.0.0.1:{options.port}",
        "CONTROLLER_LOG_JSON": "true" if options.log_json else "false",
        "CONTROLLER_METRICS_HOST": "127.0.0.1",
        "CONTROLLER_METRICS_PORT": str(options.controller_metrics_port),
    }
    argv = [sys.executable, "-m", "services.controller"]
    return ProcessSpec(name="controller", argv=argv, env=env, ports=[options.controller_metrics_port], stop_timeout=10)


def state_url(options: StackOptions) -> str:
    """The deployment state store the gateway and the controller share: `SERVING_STATE_URL` when `serving up` was
    given one, else the embedded SQLite file under the run directory (no server to start)."""
    return options.state_url or default_state_url(options.run_dir)


def ensure_admin_token(run_dir: Path) -> Path:
    """The admin API's bearer token: generated at the first start into the run directory, readable by its owner
    only; `GATEWAY_ADMIN_TOKEN` in the gateway's environment takes precedence over it. One that exists is kept, made
    0600 if it was not; an empty or blank one is a ConfigurationError (the gateway would refuse it too)."""
    path = run_dir / ADMIN_TOKEN_FILE
    if ensure_secret(path):
        return path
    narrow(path)
    if path.is_file() and not path.read_text(errors="replace").strip():
        raise ConfigurationError(
            f"the admin token file {path} is empty: delete it and `serving up` writes a new one, or write a token "
            "into it (python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return path
