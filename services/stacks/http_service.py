"""The HTTP stacks' API processes (the FastAPI baseline, the gateway): gunicorn with uvicorn workers, configured
through the environment their settings read (`SERVING_*`, `GATEWAY_*`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from services.launcher import ProcessSpec, local_address
from services.stacks.options import StackOptions


def http_service(
    options: StackOptions, *, name: str, app: str, env_prefix: str, extra_env: dict[str, str] | None = None
) -> ProcessSpec:
    """gunicorn + uvicorn workers serving `app` (an app factory, `module:create_app()`) on the stack's port."""
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
    env = http_env(options, name=name, env_prefix=env_prefix) | (extra_env or {})
    multiproc = Path(env["PROMETHEUS_MULTIPROC_DIR"])
    return ProcessSpec(
        name=name,
        argv=argv,
        env=env,
        ports=[options.port],
        ready_url=f"http://{local_address(options.host)}:{options.port}/health/ready",
        prepare=lambda: fresh_dir(multiproc),
    )


def http_env(options: StackOptions, *, name: str, env_prefix: str) -> dict[str, str]:
    """The settings (`services.common.settings.ApiSettings` under `env_prefix`) that the stack's options decide."""
    env = {
        f"{env_prefix}MODEL_DIR": str(options.model_dir.resolve()),
        f"{env_prefix}WORKERS": str(options.workers),
        f"{env_prefix}PORT": str(options.port),
        f"{env_prefix}HOST": options.host,
        "PROMETHEUS_MULTIPROC_DIR": _multiproc_dir(options, name),
    }
    if options.endpoint:
        env[f"{env_prefix}ENDPOINT"] = options.endpoint
    if name == "fastapi" and options.tuning.intra_op_threads:
        env[f"{env_prefix}INTRA_OP_THREADS"] = str(options.tuning.intra_op_threads)
    if name == "fastapi" and options.device == "sim":
        env |= {
            f"{env_prefix}DEVICE": "sim",
            f"{env_prefix}SIM_FIXED_US": repr(float(options.sim_fixed_us)),
            f"{env_prefix}SIM_PER_TOKEN_US": repr(float(options.sim_per_token_us)),
            f"{env_prefix}SIM_LOCK_FILE": str(options.sim_lock_file),
        }
    if name == "gateway" and options.tuning.coalesce_depth:
        env[f"{env_prefix}COALESCE_DEPTH"] = str(options.tuning.coalesce_depth)
    if options.log_json:
        env[f"{env_prefix}OBSERVABILITY__LOG_JSON"] = "true"
    if options.tracing_url:
        env[f"{env_prefix}OBSERVABILITY__TRACING"] = "true"
        env[f"{env_prefix}OBSERVABILITY__OTLP_ENDPOINT"] = options.tracing_url
        env[f"{env_prefix}OBSERVABILITY__SAMPLING_RATIO"] = str(options.trace_ratio)
    return env


def _multiproc_dir(options: StackOptions, name: str) -> str:
    """A fresh directory for the workers' prometheus_client files (counts of a previous run would add up); made
    fresh again before each start (`ProcessSpec.prepare`): a master killed with its workers leaves their files."""
    return str(fresh_dir(options.run_dir / f"prometheus-{name}").resolve())


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
