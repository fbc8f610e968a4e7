"""The admission bound: past it a request is refused with 429, Retry-After and a JSON body, without its body being
read or the app called; health and metrics are never bounded; a slot is freed when its request ends, even on error."""

import asyncio
import contextlib

import orjson
import pytest

from observability.logging import request_id_var
from services.api.admission import AdmissionMiddleware
from services.api.paths import is_inference


class HeldApp:
    """An ASGI app whose requests stay in flight until released."""

    def __init__(self):
        self.release = asyncio.Event()
        self.calls = 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        await self.release.wait()
        if scope["path"] == "/serve/fail":
            raise RuntimeError("boom")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def scope(path: str, method: str = "POST") -> dict:
    return {"type": "http", "method": method, "path": path, "headers": []}


async def call(app, path: str, method: str = "POST") -> list[dict]:
    sent = []

    async def receive():
        raise AssertionError("a refused request's body must not be read")

    async def send(message):
        sent.append(message)

    with contextlib.suppress(RuntimeError):
        await app(scope(path, method), receive, send)
    return sent


@pytest.mark.parametrize(
    ("method", "path", "bounded"),
    [
        ("POST", "/serve/minilm", True),
        ("POST", "/v1/embeddings", True),
        ("POST", "/v2/models/minilm/infer", True),
        ("POST", "/v2/models/minilm/versions/1/infer", True),
        ("GET", "/v2/models/minilm", False),
        ("GET", "/metrics", False),
        ("GET", "/health/ready", False),
        ("POST", "/admin/models", False),
    ],
)
def test_only_inference_routes_are_bounded(method, path, bounded):
    assert is_inference(method, path) is bounded


def test_past_the_bound_requests_are_refused_cheaply_and_slots_come_back():
    async def scenario():
        inner = HeldApp()
        app = AdmissionMiddleware(inner, limit=2, retry_after=3)
        held = [asyncio.create_task(call(app, "/serve/minilm")), asyncio.create_task(call(app, "/serve/fail"))]
        await asyncio.sleep(0)
        assert app.inflight == 2
        refused = await call(app, "/v1/embeddings")
        assert refused[0]["status"] == 429
        headers = dict(refused[0]["headers"])
        assert headers[b"retry-after"] == b"3"
        error = orjson.loads(refused[1]["body"])["error"]
        assert error["type"] == "overloaded" and "retry after 3 s" in error["message"]
        assert inner.calls == 2, "a refused request never reaches the app"
        health = asyncio.create_task(call(app, "/health/ready", "GET"))  # not bounded: reaches the app
        await asyncio.sleep(0)
        assert inner.calls == 3
        inner.release.set()
        ok, failed, _ = await asyncio.gather(*held, health)
        assert ok[0]["status"] == 200 and failed == []
        assert app.inflight == 0, "slots are freed, also when the app raised"
        assert (await call(app, "/serve/minilm"))[0]["status"] == 200

    asyncio.run(scenario())


def test_the_refusal_is_encoded_once_and_carries_the_request_id():
    async def scenario():
        app = AdmissionMiddleware(HeldApp(), limit=0, retry_after=2)
        request_id_var.set('abc-"1"')  # this task's own context: gone when it ends
        return await call(app, "/serve/minilm")

    start, sent = asyncio.run(scenario())
    message = (
        "this worker is handling 0 requests, its limit (SERVING_/GATEWAY_MAX_INFLIGHT); retry after 2 s, or add workers"
    )
    expected = {"error": {"message": message, "type": "overloaded", "code": 429, "request_id": 'abc-"1"'}}
    assert sent["body"] == orjson.dumps(expected), "the same bytes a per-refusal orjson.dumps would give"
    assert dict(start["headers"])[b"content-length"] == str(len(sent["body"])).encode()
