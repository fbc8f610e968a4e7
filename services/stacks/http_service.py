"""The HTTP stacks' API processes (the FastAPI baseline, the gateway): gunicorn with uvicorn workers, configured
through the environment their settings class reads (`services.common.settings_env.to_env`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.common.settings import ApiSettings
from services.common.settings_env import to_env
from services.launcher import ProcessSpec, local_address
from services.stacks.metrics_dir import metrics_link, remove_metrics_dir, renew
from services.stacks.options import StackOptions


def http_service(
    options: StackOptions,
    *,
    name: str,
    app: str,
    settings: type[ApiSettings] = ApiSettings,
    values: Mapping[str, Any] | None = None,
    extra_env: dict[str, str] | None = None,
) -> ProcessSpec:
    """gunicorn + uvicorn workers serving `app` (an app factory, `module:create_app()`) on the stack's port, with
    the `settings` the options decide and `values` (fields by name) given to it; `extra_env` is added as it is."""
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        "python:services.api.gunicorn_conf",
        "--bind",
        f"{options.host}:{options.port}",
        "--workers",
        str(options.workers),
        "--name",
        name,
        app,
    ]
    env = http_env(options, name=name, settings=settings, values=values) | (extra_env or {})
    link = Path(env["PROMETHEUS_MULTIPROC_DIR"])
    return ProcessSpec(
        name=name,
        argv=argv,
        env=env,
        ports=[options.port],
        ready_url=f"http://{local_address(options.host)}:{options.port}/health/ready",
        prepare=lambda: renew(link),
        cleanup=lambda: remove_metrics_dir(link),
    )


def http_env(
    options: StackOptions,
    *,
    name: str,
    settings: type[ApiSettings] = ApiSettings,
    values: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The environment of `settings` holding what the stack's options decide, and `values` over them."""
    fields: dict[str, Any] = {
        "model_dir": options.model_dir.resolve(),
        "workers": options.workers,
        "port": options.port,
        "host": options.host,
    }
    if options.endpoint:
        fields["endpoint"] = options.endpoint
    if name == "fastapi" and options.tuning.intra_op_threads:
        fields["intra_op_threads"] = options.tuning.intra_op_threads
    if name == "fastapi" and options.device == "cuda":
        fields["device"] = "cuda"
    if name == "fastapi" and options.device == "sim":
        fields |= {
            "device": "sim",
            "sim_fixed_us": options.sim_fixed_us,
            "sim_per_token_us": options.sim_per_token_us,
            "sim_lock_file": options.sim_lock_file,
        }
    if name == "gateway" and options.tuning.coalesce_depth:
        fields["coalesce_depth"] = options.tuning.coalesce_depth
    observability: dict[str, Any] = {}
    if options.log_json:
        observability["log_json"] = True
    if options.tracing_url:
        observability |= {"tracing": True, "otlp_endpoint": options.tracing_url, "sampling_ratio": options.trace_ratio}
    if observability:
        fields["observability"] = observability
    env = to_env(settings.model_validate(fields | dict(values or {})))
    return env | {"PROMETHEUS_MULTIPROC_DIR": str(metrics_link(options.run_dir, name))}
