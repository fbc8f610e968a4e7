"""The FastAPI application factory shared by the HTTP stacks: they differ only in the parts they plug in."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import APIRouter, FastAPI

from observability import metrics
from observability.logging import setup_logging
from observability.repeats import RepeatLimit, limit_repeats
from observability.tally import TALLY, flush_while
from observability.tracing import setup_tracing, shutdown_tracing
from services.api import edge, errors, http_limits, lifetime, routes, serve_route, v2
from services.api.admission import Gate
from services.api.auth import ApiKeys, load_keys
from services.api.dataplane import DataPlane
from services.api.docs import install_docs
from services.api.edge import Edge
from services.api.endpoint import EndpointSource
from services.api.errors import install_error_handlers
from services.api.http_limits import LIMITS_KEY, HttpLimits
from services.api.lifetime import Lifetimes
from services.api.serve_route import ServeFastPath
from services.api.v2_grpc import STOP_GRACE, start_grpc
from services.common.backend import InferenceBackend, ServedModel
from services.common.contract import MANIFEST_FILE, TOKENIZER_FILE, Manifest
from services.common.settings import ApiSettings
from services.common.tokenization import TextTokenizer
from services.monitoring.drift import DriftMonitor

log = logging.getLogger(__name__)
REQUEST_LOGGERS = (
    edge.completion_log,
    errors.log,
    serve_route.log,
    lifetime.log,
    http_limits.log,
    http_limits.SERVER_LOG,
)
"""The loggers whose error lines a client's request decides: each worker writes at most `error_log_burst` of one
kind per `error_log_interval` (`observability.repeats`)."""


@dataclass
class StackParts:
    """What a stack plugs into the shared API, built once the built-in model's manifest is known (None when the
    stack has no built-in model: the gateway may serve registry-deployed endpoints only)."""

    backend: InferenceBackend
    """The built-in model's backend; also what readiness asks."""
    sources: list[EndpointSource] = field(default_factory=list)
    """Where its endpoints beyond the built-in one come from, asked in order (a name found first wins)."""
    buckets: list[int] | None = None
    """Token-length buckets to pad to (a server that batches only equal shapes); None pads to the longest text."""


PartsFactory = Callable[[Manifest | None, DriftMonitor], StackParts]


def builtin_manifest(settings: ApiSettings, required: bool) -> Manifest | None:
    """The built-in model's manifest; None when the stack may go without one and the model directory has none."""
    if required or (settings.model_dir / MANIFEST_FILE).is_file():
        return Manifest.load(settings.model_dir)
    log.info("no built-in model at %s: serving configured and deployed endpoints only", settings.model_dir)
    return None


def builtin_model(settings: ApiSettings, manifest: Manifest, stack: StackParts) -> ServedModel:
    """The built-in endpoint's model, announced in the log and in `serving_model_info`."""
    tokenizer = TextTokenizer(settings.model_dir / TOKENIZER_FILE, manifest.max_seq_length, stack.buckets)
    endpoint = settings.endpoint or manifest.endpoint_name
    metrics.MODEL_INFO.labels(manifest.name, manifest.version, manifest.task).set(1)
    log.info("serving %s v%s (%s) on endpoint '%s'", manifest.name, manifest.version, manifest.task, endpoint)
    return ServedModel(endpoint, manifest.version, manifest, tokenizer, stack.backend)


def create_app(
    settings: ApiSettings,
    parts: PartsFactory,
    *,
    service_name: str,
    builtin_required: bool = True,
    routers: tuple[APIRouter, ...] = (),
    request_loggers: tuple[logging.Logger, ...] = (),
    grpc_port: int = 0,
    grpc_setting: str = "",
) -> Edge:
    """The ASGI app a server runs: the edge (request id, API keys, admission, the request's lifetime, access
    metrics: `services.api.edge`), the /serve fast path, then FastAPI. `request_loggers`: the stack's own loggers
    whose error lines a request decides, limited as `REQUEST_LOGGERS` are. `grpc_port`: where each worker also
    serves the Open Inference Protocol over gRPC (`services.api.v2_grpc`), 0 for nowhere; `grpc_setting` names the
    setting that chose it, for the error a port in use gets."""
    obs = settings.observability
    setup_logging(obs.log_level, obs.log_json)
    burst, interval = settings.error_log_burst, settings.error_log_interval
    if not any(isinstance(f, http_limits.ServerLineStatus) for f in http_limits.SERVER_LOG.filters):
        # before the limit: it marks what the limit counts
        http_limits.SERVER_LOG.addFilter(http_limits.ServerLineStatus())
    limit_repeats(RepeatLimit(burst, interval), *REQUEST_LOGGERS, *request_loggers)
    share = settings.completion_log_sample  # `serving logs --request-id` reads it back when it finds no line
    log.info(
        "completion lines: errors (at most %d of one route and status in %g s, then counted), and a share of %g of "
        "the other requests",
        burst,
        interval,
        share,
        extra={"completion_log_sample": share, "error_log_burst": burst, "error_log_interval": interval},
    )

    keys = load_keys(settings)
    api_keys = ApiKeys(keys, settings.protect_metrics) if keys else None
    gate = Gate(settings.max_inflight, settings.max_reading)  # HTTP and gRPC requests share the worker's bounds

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict]:
        setup_tracing(service_name, enabled=obs.tracing, endpoint=obs.otlp_endpoint, sampling_ratio=obs.sampling_ratio)
        manifest = builtin_manifest(settings, builtin_required)
        monitor = DriftMonitor(settings.monitoring)
        stack = parts(manifest, monitor)
        builtin = builtin_model(settings, manifest, stack) if manifest is not None else None
        await stack.backend.start()
        dataplane = DataPlane(settings, builtin, stack.backend, stack.sources)
        await dataplane.catalog.start()
        await monitor.start()
        app.state.dataplane = dataplane
        await dataplane.warm_up()
        grpc_server = None
        if grpc_port:
            grpc_server = await start_grpc(dataplane, gate, api_keys, settings, grpc_port, grpc_setting)
        flusher = asyncio.get_running_loop().create_task(flush_while())  # the metrics tally, while requests run
        try:
            # the lifespan state reaches every connection's protocol: the limits it enforces before any ASGI code runs
            yield {LIMITS_KEY: HttpLimits(settings.max_header_bytes, settings.read_timeout)}
        finally:
            if grpc_server is not None:
                await grpc_server.stop(STOP_GRACE)
            dataplane.ready = False
            flusher.cancel()
            TALLY.flush()
            await monitor.stop()
            await dataplane.catalog.stop()
            await stack.backend.stop()
            shutdown_tracing()

    app = FastAPI(title=f"{service_name} serving API", lifespan=lifespan, docs_url=None, redoc_url=None)
    install_docs(app)  # Swagger UI and ReDoc from local assets: /docs works offline
    app.include_router(serve_route.router)  # documents /serve; the ServeFastPath door in front answers it
    app.include_router(routes.router)
    app.include_router(v2.router)
    for extra in routers:
        app.include_router(extra)
    install_error_handlers(app)
    return Edge(
        ServeFastPath(app),
        service_name,
        gate,
        Lifetimes(settings.request_timeout),
        api_keys,
        settings.completion_log_sample,
    )
