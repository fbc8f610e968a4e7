"""ASGI entry point of the gateway: `gunicorn 'services.gateway.app:create_app()'`.

One Triton gRPC client per worker, shared by the built-in endpoint's backend and the configured endpoints.
"""

from __future__ import annotations

from services.api.app import StackParts
from services.api.app import create_app as create_api
from services.common.backend import NoConfiguredEndpoints
from services.common.contract import Manifest
from services.gateway.backend import TritonBackend
from services.gateway.custom import EndpointRegistry
from services.gateway.endpoints import EndpointWatcher
from services.gateway.settings import GatewaySettings
from services.gateway.triton_client import TritonClient


def create_app(settings: GatewaySettings | None = None):
    settings = settings or GatewaySettings()

    def parts(manifest: Manifest) -> StackParts:
        triton = TritonClient(
            settings.triton_grpc_url, timeout=settings.triton_timeout, retry_after=settings.retry_after
        )
        if settings.endpoints_file is None:
            endpoints = NoConfiguredEndpoints()
        else:
            path = settings.endpoints_file.resolve()
            serving_url = f"http://127.0.0.1:{settings.port}/serve"
            endpoints = EndpointWatcher(
                path,
                lambda file: EndpointRegistry.build(file, triton, serving_url, path.parent),
                settings.endpoints_poll_interval,
            )
        return StackParts(TritonBackend(settings, manifest, triton), endpoints, buckets=settings.buckets or None)

    return create_api(settings, parts, service_name="gateway")
