"""ASGI entry point of the gateway: `gunicorn 'services.gateway.app:create_app()'`.

One Triton gRPC client per worker, shared by the built-in endpoint, the registry-deployed endpoints (the shared
deployment state, `SERVING_STATE_URL`) and the configured endpoints (clearml-serving preprocess code). One state
store per worker, shared by its deployed endpoints and its admin API.
"""

from __future__ import annotations

import os
from pathlib import Path

from services.api.app import StackParts
from services.api.app import create_app as create_api
from services.api.edge import Edge
from services.api.endpoint import EndpointSource
from services.api.openapi import ADMIN_EXAMPLES, with_examples
from services.common.contract import Manifest
from services.common.settings_env import env_name
from services.gateway import configured
from services.gateway.admin import admin_router
from services.gateway.backend import TritonBackend
from services.gateway.configured import build_configured
from services.gateway.deployed import build_deployed
from services.gateway.file_source import FileWatcher
from services.gateway.settings import GatewaySettings, refuse_unknown_names
from services.gateway.state_source import StoreWatcher
from services.gateway.user_threads import UserThreads
from services.gateway.version_files import version_files
from services.launcher import local_address
from services.lifecycle.deployments import EndpointState
from services.lifecycle.store import DeploymentStore
from services.monitoring.drift import DriftMonitor
from services.triton.grpc_client import TritonClient


def create_app(settings: GatewaySettings | None = None) -> Edge:
    """The gateway's app; without `settings`, read from the environment, which must name no setting the gateway
    does not read (`refuse_unknown_names`)."""
    if settings is None:
        refuse_unknown_names(os.environ)
        settings = GatewaySettings()
    store = DeploymentStore.open(settings.state_url) if settings.state_url else None

    def parts(manifest: Manifest | None, monitor: DriftMonitor) -> StackParts:
        triton = TritonClient(
            settings.triton_grpc_url,
            timeout=settings.triton_timeout,
            retry_after=settings.retry_after,
            balance=settings.triton_balance,
            hedge=settings.triton_hedge,
        )
        buckets = settings.buckets or None
        sources: list[EndpointSource] = []  # asked in order: a name deployed from the registry wins
        if store is not None:
            cache: dict = {}

            def locate(name: str, endpoint: EndpointState, version: str) -> Path:
                return version_files(
                    name,
                    endpoint.versions[version],
                    settings.versions_dir,
                    registered_name=endpoint.registered_name,
                    tracking_uri=settings.registry_url,
                    models_dir=None if settings.versions_from_registry else settings.controller_models_dir,
                )

            sources.append(
                StoreWatcher(
                    store,
                    lambda state: build_deployed(state, triton, buckets, locate, cache, monitor.load_reference),
                    settings.endpoints_poll_interval,
                )
            )
        if settings.endpoints_file is not None:
            path = settings.endpoints_file.resolve()
            serving_url = settings.serving_base_url or f"http://{local_address(settings.host)}:{settings.port}/serve"
            threads = UserThreads(user_code_threads(settings), settings.request_timeout, settings.retry_after)
            sources.append(
                FileWatcher(
                    path,
                    lambda file: build_configured(
                        file, triton, serving_url, path.parent, threads, settings.endpoints_load_timeout
                    ),
                    settings.endpoints_poll_interval,
                    settings.endpoints_retire_after,
                    health=threads.health,
                )
            )
        model = settings.triton_model if manifest is not None else None
        return StackParts(TritonBackend(triton, model, manifest), sources, buckets=buckets)

    return create_api(
        settings,
        parts,
        service_name="gateway",
        builtin_required=False,
        routers=(with_examples(admin_router(settings, store), ADMIN_EXAMPLES),),
        request_loggers=(configured.log,),  # a failure of the user's code, with its traceback, per request
        grpc_port=settings.grpc_port,
        grpc_setting=env_name(GatewaySettings, "grpc_port"),
    )


SPARE_THREADS = 8
"""Threads beside the admitted requests' ones (an async step's sync helpers, a thread kept by code that hangs)."""


def user_code_threads(settings: GatewaySettings) -> int:
    """A thread for every request the worker admits (`max_inflight`), plus spares (`user_threads`). Synchronous
    preprocess code runs on these threads, and a sync pipeline's `send_request` blocks its thread until the endpoint
    it calls answers, often on this same worker: with fewer threads than admitted requests (asyncio's default is the
    CPU count + 4), a few concurrent pipelines would hold every thread while the requests they wait for queue for
    one, until timeout. With one a request, every admitted request runs, and calls past `max_inflight` (a pipeline
    calling itself without end) get 429, which `send_request` returns as None."""
    return settings.max_inflight + SPARE_THREADS
