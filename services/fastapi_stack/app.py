"""ASGI entry point of the FastAPI stack: `gunicorn 'services.fastapi_stack.app:create_app()'`."""

from __future__ import annotations

from services.api.app import create_app as create_api
from services.common.settings import ApiSettings
from services.fastapi_stack.backend import LocalOnnxBackend


def create_app(settings: ApiSettings | None = None):
    return create_api(settings or ApiSettings(), LocalOnnxBackend, service_name="fastapi")
