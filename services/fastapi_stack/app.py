"""ASGI entry point of the FastAPI stack: `gunicorn 'services.fastapi_stack.app:create_app()'`."""

from __future__ import annotations

from services.api.app import StackParts
from services.api.app import create_app as create_api
from services.api.edge import Edge
from services.common.contract import Manifest
from services.common.errors import ConfigurationError
from services.common.settings import ApiSettings
from services.fastapi_stack.backend import LocalOnnxBackend
from services.monitoring.drift import DriftMonitor


def create_app(settings: ApiSettings | None = None) -> Edge:
    settings = settings or ApiSettings()

    def parts(manifest: Manifest | None, monitor: DriftMonitor) -> StackParts:
        if manifest is None:  # `create_api` requires the built-in model: it refuses to start without one
            raise ConfigurationError("the FastAPI stack serves the built-in model, and none was found")
        return StackParts(LocalOnnxBackend(settings, manifest))

    return create_api(settings, parts, service_name="fastapi")
