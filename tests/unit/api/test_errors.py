"""The HTTP edge of the error hierarchy: every error a complete JSON answer, none left to the server to handle."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI

from services.api.errors import install_error_handlers
from services.common.errors import Unavailable


def app_that_fails() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    async def boom():
        raise RuntimeError("a bug")

    @app.get("/unavailable")
    async def unavailable():
        raise Unavailable("Triton is down", retry_after=2)

    return app


async def get(path: str) -> httpx.Response:
    # raise_app_exceptions: an exception that leaves the app (for the server to handle) fails the test
    transport = httpx.ASGITransport(app_that_fails(), raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.get(path)


def test_an_unexpected_error_is_answered_and_does_not_reach_the_server():
    """Before: Starlette re-raised it after the 500, and uvicorn dropped the keep-alive connection (issue 21)."""
    response = asyncio.run(get("/boom"))
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "internal_error"
    assert "connection" not in response.headers  # the connection stays usable: nothing to announce


def test_a_serving_error_keeps_its_status_and_retry_after():
    response = asyncio.run(get("/unavailable"))
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    assert response.json()["error"]["message"] == "Triton is down"


def test_an_unknown_route_s_404_and_405_carry_a_short_path():
    """Before (issue 37): the 404 body echoed the whole path (60 KB for a 60,000-character one)."""
    path = "/nothing/" + "b" * 60_000
    response = asyncio.run(get(path))
    message = response.json()["error"]["message"]
    assert response.status_code == 404 and len(response.content) < 400, message
    assert message.startswith("no route GET /nothing/bbb") and "(60009 characters)" in message
