"""ASGI entry point of the FastAPI stack: `gunicorn 'services.fastapi_stack.app:create_app()'`."""

from __future__ import annotations

from services.api.app import StackParts
from services.api.app import create_app as create_api
from services.common.contract import Manifest
from services.common.settings import ApiSettings
from services.fastapi_stack.backend import LocalOnnxBackend


def create_app(settings: ApiSettings | None = None):
    settings = settings or ApiSettings()

    def parts(manifest: Manifest, monitor) -> StackParts:
        return StackParts(LocalOnnxBackend(settings, manifest))

    return create_api(settings, parts, service_name="fastapi")
