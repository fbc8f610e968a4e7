"""ASGI entry point of the gateway: `gunicorn 'services.gateway.app:create_app()'`."""

from __future__ import annotations

from services.api.app import create_app as create_api
from services.api.dataplane import DataPlane
from services.gateway.backend import TritonBackend
from services.gateway.custom import EndpointRegistry
from services.gateway.endpoints import EndpointWatcher
from services.gateway.settings import GatewaySettings
from services.gateway.v2 import router as v2_router


def create_app(settings: GatewaySettings | None = None):
    settings = settings or GatewaySettings()

    async def attach_endpoints(dataplane: DataPlane):
        if settings.endpoints_file is None:
            async def nothing() -> None:
                return None
            return nothing
        path = settings.endpoints_file.resolve()
        triton = dataplane.backend.triton
        serving_url = f"http://127.0.0.1:{settings.port}/serve"
        watcher = EndpointWatcher(
            path, lambda file: EndpointRegistry.build(file, triton, serving_url, path.parent),
            settings.endpoints_poll_interval,
        )
        dataplane.configured_endpoint = lambda name: watcher.current.get(name)
        watcher.start()
        return watcher.stop

    return create_api(settings, TritonBackend, service_name="gateway", buckets=settings.buckets or None,
                      extension=attach_endpoints, routers=(v2_router,))
