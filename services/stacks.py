"""What each STACK runs: the process specs the launcher starts for `serving up`."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from services.common.contract import Manifest
from services.common.errors import ConfigurationError
from services.common.tokenization import default_buckets
from services.launcher import RUN_DIR, ProcessSpec
from services.triton.repository import RenderOptions, render
from services.triton.server import TritonPorts, triton_process

STACKS = ("fastapi", "triton", "clearml")
TRITON_KNOBS = (
    "max_queue_delay_us",
    "max_queue_size",
    "preferred_batch_sizes",
    "tokenizer_instances",
    "encoder_instances",
    "intra_op_threads",
    "spin",
)
# Behind the gateway, Triton holds no request waiting for others: the gateway's workers already coalesce their
# concurrent requests, and Triton still batches whatever queues while its instance is busy, so batching follows
# the load. Measured (clearml w1, real model, 2 cores): saturated 391 vs 396 req/s, and at a quarter of that
# p50 7.5 ms against 9.6 ms with the 2 ms delay (STACK=fastapi: 7.0 ms).
STACK_TRITON_DEFAULTS = {"clearml": {"max_queue_delay_us": 0}}
ADMIN_TOKEN_FILE = "admin-token"


@dataclass(frozen=True)
class StackOptions:
    stack: str = "clearml"
    """fastapi | triton | clearml (the gateway, `make up`'s default)."""
    workers: int = 1
    batching: bool = True
    host: str = "0.0.0.0"
    port: int = 8080
    model_dir: Path = Path("build/model")
    run_dir: Path = RUN_DIR
    triton_ports: TritonPorts = TritonPorts()
    padding: str = "ragged"
    endpoints_file: Path = Path("endpoints.json")
    endpoint: str | None = None
    """Name of the built-in endpoint (`/serve/{endpoint}`); None: the model's (`Manifest.endpoint_name`)."""
    log_json: bool = False
    """Every process writes JSON lines (into the run's log directory when detached): `serving logs` merges them."""
    otlp_endpoint: str | None = None
    """Trace every service of the stack to this OTLP/HTTP traces URL (any collector); None: see `traces`."""
    traces: bool = False
    """Trace every service into the stack's own receiver (spans in run/traces/spans.db, for `serving analyze`)."""
    trace_port: int = 4318
    trace_ratio: float = 1.0
    """Share of requests that arrive without a trace context to trace (a caller's `traceparent` decides for its
    own requests: parent-based sampling in every service, Triton included)."""

    tuning: dict = field(default_factory=dict, hash=False)
    """Settings `loadtest tune` searches: Triton's max_queue_delay_us, preferred_batch_sizes, tokenizer_instances,
    encoder_instances; ONNX Runtime's intra_op_threads (Triton's encoder, or the FastAPI workers) and spin (Triton's
    encoder); the gateway's coalesce_depth."""

    @property
    def tracing_url(self) -> str | None:
        if self.otlp_endpoint:
            return self.otlp_endpoint
        return f"http://127.0.0.1:{self.trace_port}/v1/traces" if self.traces else None


def _multiproc_dir(options: StackOptions, name: str) -> str:
    path = options.run_dir / f"prometheus-{name}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return str(path.resolve())


def http_service(
    options: StackOptions, *, name: str, app: str, env_prefix: str, extra_env: dict[str, str] | None = None
) -> ProcessSpec:
    """gunicorn + uvicorn workers serving one of the HTTP stacks' apps."""
    env = {
        f"{env_prefix}MODEL_DIR": str(options.model_dir.resolve()),
        f"{env_prefix}WORKERS": str(options.workers),
        f"{env_prefix}PORT": str(options.port),
        f"{env_prefix}HOST": options.host,
        "PROMETHEUS_MULTIPROC_DIR": _multiproc_dir(options, name),
        **(extra_env or {}),
    }
    if options.endpoint:
        env[f"{env_prefix}ENDPOINT"] = options.endpoint
    if name == "fastapi" and options.tuning.get("intra_op_threads"):
        env[f"{env_prefix}INTRA_OP_THREADS"] = str(options.tuning["intra_op_threads"])
    if name == "gateway" and options.tuning.get("coalesce_depth"):
        env[f"{env_prefix}COALESCE_DEPTH"] = str(options.tuning["coalesce_depth"])
    if options.log_json:
        env[f"{env_prefix}OBSERVABILITY__LOG_JSON"] = "true"
    if options.tracing_url:
        env[f"{env_prefix}OBSERVABILITY__TRACING"] = "true"
        env[f"{env_prefix}OBSERVABILITY__OTLP_ENDPOINT"] = options.tracing_url
        env[f"{env_prefix}OBSERVABILITY__SAMPLING_RATIO"] = str(options.trace_ratio)
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
    return ProcessSpec(
        name=name, argv=argv, env=env, ports=[options.port], ready_url=f"http://127.0.0.1:{options.port}/health/ready"
    )


def trace_receiver(options: StackOptions) -> ProcessSpec:
    """The stack's own OTLP/HTTP receiver (`services.analysis.receiver`), on loopback."""
    store = (options.run_dir / "traces" / "spans.db").resolve()
    argv = [
        sys.executable,
        "-m",
        "services.analysis.receiver",
        "--store",
        str(store),
        "--port",
        str(options.trace_port),
    ]
    return ProcessSpec(
        name="traces", argv=argv, ports=[options.trace_port], ready_url=f"http://127.0.0.1:{options.trace_port}/health"
    )


def stack_processes(options: StackOptions) -> list[ProcessSpec]:
    if options.stack not in STACKS:
        raise ConfigurationError(f"unknown STACK '{options.stack}'; choose one of {', '.join(STACKS)}")
    receiver = [trace_receiver(options)] if options.traces and not options.otlp_endpoint else []
    return receiver + _stack_processes(options)


def _stack_processes(options: StackOptions) -> list[ProcessSpec]:
    if options.stack == "fastapi":
        return [
            http_service(options, name="fastapi", app="services.fastapi_stack.app:create_app()", env_prefix="SERVING_")
        ]
    if options.stack == "triton":
        return [triton_service(options, models=["tokenizer", "encoder", "ensemble"])]
    # clearml: Triton serves the encoder alone; the gateway's workers tokenize and call it over gRPC; the lifecycle
    # controller deploys registry versions into the same Triton.
    triton = triton_service(options, models=["encoder"])
    lifecycle = (options.run_dir / "lifecycle").resolve()
    env = {
        "GATEWAY_TRITON_GRPC_URL": f"127.0.0.1:{options.triton_ports.grpc}",
        "GATEWAY_ENDPOINTS_FILE": str(options.endpoints_file.resolve()),
        "GATEWAY_DEPLOYMENTS_FILE": str(lifecycle / "deployments.json"),
        "GATEWAY_ADMIN_TOKEN_FILE": str(ensure_admin_token(options.run_dir).resolve()),
    }
    if options.padding == "bucket":
        env["GATEWAY_BUCKETS"] = json.dumps(default_buckets(Manifest.load(options.model_dir).max_seq_length))
    gateway = http_service(
        options, name="gateway", app="services.gateway.app:create_app()", env_prefix="GATEWAY_", extra_env=env
    )
    return [triton, gateway, controller_process(options, lifecycle)]


def controller_process(options: StackOptions, lifecycle: Path) -> ProcessSpec:
    """The lifecycle controller: registry versions into Triton, drains, rollouts (`services.lifecycle.controller`)."""
    env = {
        "SERVING_RUN_DIR": str(options.run_dir.resolve()),
        "CONTROLLER_DEPLOYMENTS_FILE": str(lifecycle / "deployments.json"),
        "CONTROLLER_MODELS_DIR": str(lifecycle / "models"),
        "CONTROLLER_TRITON_REPOSITORY": str((options.run_dir / "triton-repository").resolve()),
        "CONTROLLER_TRITON_HTTP_URL": f"http://127.0.0.1:{options.triton_ports.http}",
        "CONTROLLER_GATEWAY_URL": f"http://127.0.0.1:{options.port}",
        "CONTROLLER_LOG_JSON": "true" if options.log_json else "false",
    }
    return ProcessSpec(
        name="controller", argv=[sys.executable, "-m", "services.lifecycle.controller"], env=env, stop_timeout=10
    )


def ensure_admin_token(run_dir: Path) -> Path:
    """The admin API's bearer token: generated at the first start into the run directory, readable by its owner
    only; `GATEWAY_ADMIN_TOKEN` in the environment overrides it."""
    path = run_dir / ADMIN_TOKEN_FILE
    if not path.is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
    return path


def triton_service(
    options: StackOptions, *, models: list[str], render_options: RenderOptions | None = None
) -> ProcessSpec:
    """The real tritonserver with a repository rendered for this machine (`local` target)."""
    triton_knobs = {**STACK_TRITON_DEFAULTS.get(options.stack, {}), **options.tuning}
    triton_knobs = {k: v for k, v in triton_knobs.items() if k in TRITON_KNOBS}
    if "preferred_batch_sizes" in triton_knobs:
        triton_knobs["preferred_batch_sizes"] = tuple(triton_knobs["preferred_batch_sizes"])
    render_options = render_options or RenderOptions(
        target="local", batching=options.batching, padding=options.padding, **triton_knobs
    )
    repository = render(options.model_dir, options.run_dir / "triton-repository", render_options)
    spec = triton_process(
        repository, options.run_dir, options.triton_ports, models, extra_args=triton_tracing_args(options)
    )
    if options.log_json:  # Triton's own lines, and its Python stubs', rewritten as JSON
        spec.argv = [sys.executable, "-m", "services.triton.logpipe", "--", *spec.argv]
    return spec


def triton_tracing_args(options: StackOptions) -> list[str]:
    """Triton's OpenTelemetry mode: it exports its own spans and joins the caller's W3C `traceparent`.

    Triton traces every request that carries a trace context, whatever its sampled flag, and `rate` of the
    others (1 in N; 0: none). So its callers send a context only with sampled requests (the gateway, the load
    generator), and `rate` applies the stack's ratio to the context-less requests that reach Triton directly
    (STACK=triton); behind a front, Triton traces only what the front sampled."""
    url = options.tracing_url
    if not url:
        return []
    direct = options.stack == "triton"
    rate = round(1 / options.trace_ratio) if direct and options.trace_ratio > 0 else 0
    return [
        "--trace-config=mode=opentelemetry",
        f"--trace-config=rate={rate}",
        "--trace-config=count=-1",
        "--trace-config=level=TIMESTAMPS",
        f"--trace-config=opentelemetry,url={url}",
        "--trace-config=opentelemetry,bsp_schedule_delay=1000",  # export every second (default 5): analyze sooner
        "--trace-config=opentelemetry,resource=service.name=triton",
    ]


def stack_info(options: StackOptions) -> dict:
    """What `serving status` shows about a stack besides its processes: the model, the knobs, the URLs to call."""
    manifest = Manifest.load(options.model_dir)
    api = f"http://127.0.0.1:{options.triton_ports.http if options.stack == 'triton' else options.port}"
    urls = {"api": api}
    if options.stack == "triton":
        urls["infer"] = f"{api}/v2/models/ensemble/infer"
    else:
        urls |= {
            "serve": f"{api}/serve/{options.endpoint or manifest.endpoint_name}",
            "openai": f"{api}/v1/embeddings",
            "metrics": f"{api}/metrics",
            "docs": f"{api}/docs",
        }
    if options.stack != "fastapi":
        urls["triton_metrics"] = f"http://127.0.0.1:{options.triton_ports.metrics}/metrics"
    return {
        "stack": options.stack,
        "workers": options.workers,
        "batching": "on" if options.batching else "off",
        "model": {
            "name": manifest.name,
            "version": manifest.version,
            "task": manifest.task,
            "dir": str(options.model_dir.resolve()),
        },
        "urls": urls,
    }
