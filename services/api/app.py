"""The FastAPI application factory shared by the HTTP stacks: they differ only in their inference backend."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from observability import metrics
from observability.logging import setup_logging
from observability.tracing import setup_tracing, shutdown_tracing
from services.api.dataplane import DataPlane
from services.api.errors import install_error_handlers
from services.api.fastpath import ServeFastPath
from services.api.middleware import ObservabilityMiddleware
from services.api.routes import router
from services.common.backend import InferenceBackend
from services.common.contract import Manifest
from services.common.settings import ApiSettings
from services.common.tokenization import TextTokenizer

log = logging.getLogger(__name__)

BackendFactory = Callable[[ApiSettings, Manifest], InferenceBackend]
# Called once the data plane exists; may attach more to it; returns an async cleanup.
Extension = Callable[[DataPlane], Awaitable[Callable[[], Awaitable[None]]]]


def create_app(settings: ApiSettings, backend_factory: BackendFactory, *, service_name: str,
               buckets: list[int] | None = None, extension: Extension | None = None,
               routers: tuple[APIRouter, ...] = ()):
    """The ASGI app a server runs: observability outermost, then the /serve fast path, then FastAPI."""
    obs = settings.observability
    setup_logging(obs.log_level, obs.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        setup_tracing(service_name, enabled=obs.tracing, endpoint=obs.otlp_endpoint, sampling_ratio=obs.sampling_ratio)
        manifest = Manifest.load(settings.model_dir)
        tokenizer = TextTokenizer(settings.model_dir / "tokenizer.json", manifest.max_seq_length, buckets)
        backend = backend_factory(settings, manifest)
        await backend.start()
        dataplane = DataPlane(settings, manifest, tokenizer, backend)
        app.state.dataplane = dataplane
        metrics.MODEL_INFO.labels(manifest.name, manifest.version, manifest.task).set(1)
        cleanup = await extension(dataplane) if extension else None
        await dataplane.warm_up()
        log.info("serving %s v%s (%s) on endpoint '%s'", manifest.name, manifest.version, manifest.task,
                 settings.endpoint)
        try:
            yield
        finally:
            dataplane.ready = False
            if cleanup:
                await cleanup()
            await backend.stop()
            shutdown_tracing()

    app = FastAPI(title=f"{service_name} serving API", lifespan=lifespan)
    app.include_router(router)
    for extra in routers:
        app.include_router(extra)
    install_error_handlers(app)
    return ObservabilityMiddleware(ServeFastPath(app), service_name=service_name)
