"""The admission bounds: a request counts toward the in-flight bound once its body has arrived, and past it gets 429
with Retry-After and a JSON body without the app being called; requests still sending their bodies have a bound of
their own (503); health and metrics are never bounded; slots are freed when their request ends, even on error."""

import asyncio
import contextlib
from functools import partial

import orjson
import pytest

from observability.logging import request_id_var
from services.api.admission import Gate
from services.api.edge import Edge
from services.api.lifetime import Lifetimes
from services.api.paths import is_inference


def gated(app, limit: int, reading_limit: int | None = None, retry_after: int = 1) -> Edge:
    """The edge with these admission bounds in front of `app` (the gate is `.gate`)."""
    return Edge(app, "unit", Gate(limit, reading_limit, retry_after), Lifetimes(60.0))


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


WHOLE = {"type": "http.request", "body": b"{}", "more_body": False}


async def call(app, path: str, method: str = "POST", messages: tuple[dict, ...] = (WHOLE,)) -> list[dict]:
    """The messages the app sent; the request's body arrives as `messages`, then nothing more comes."""
    sent = []
    pending = list(messages)

    async def receive():
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()  # a stalled client: nothing more, ever

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
        app = gated(inner, limit=2, retry_after=3)
        held = [asyncio.create_task(call(app, "/serve/minilm")), asyncio.create_task(call(app, "/serve/fail"))]
        await asyncio.sleep(0)
        assert app.gate.inflight == 2
        refused = await call(app, "/v1/embeddings")
        assert refused[0]["status"] == 429
        headers = dict(refused[0]["headers"])
        assert headers[b"retry-after"] == b"3"
        error = orjson.loads(refused[1]["body"])["error"]
        assert error["type"] == "overloaded" and "retry after 3 s" in error["message"]
        assert inner.calls == 2, "a refused request never reaches the app"
        assert app.gate.reading == 0, "a whole body is not being read any more"
        health = asyncio.create_task(call(app, "/health/ready", "GET"))  # not bounded: reaches the app
        await asyncio.sleep(0)
        assert inner.calls == 3
        inner.release.set()
        ok, failed, _ = await asyncio.gather(*held, health)
        assert ok[0]["status"] == 200 and failed == []
        assert app.gate.inflight == 0, "slots are freed, also when the app raised"
        assert (await call(app, "/serve/minilm"))[0]["status"] == 200

    asyncio.run(scenario())


def test_the_refusal_is_encoded_once_and_carries_the_request_id():
    async def scenario():
        app = partial(Gate(limit=0, reading_limit=1, retry_after=2).admit, HeldApp())  # the gate alone
        request_id_var.set('abc-"1"')  # this task's own context: gone when it ends
        return await call(app, "/serve/minilm")

    start, sent = asyncio.run(scenario())
    message = "this worker is handling 0 requests, its limit (SERVING_MAX_INFLIGHT); retry after 2 s, or add workers"
    expected = {"error": {"message": message, "type": "overloaded", "code": 429, "request_id": 'abc-"1"'}}
    assert sent["body"] == orjson.dumps(expected), "the same bytes a per-refusal orjson.dumps would give"
    assert dict(start["headers"])[b"content-length"] == str(len(sent["body"])).encode()


class ReadingApp:
    """An ASGI app that reads the whole body, then answers 200 (or the 429 `Overloaded` gives, as the handlers do)."""

    def __init__(self):
        self.bodies = []

    async def __call__(self, scope, receive, send):
        from services.common.errors import Overloaded

        body = b""
        try:
            while (message := await receive())["type"] == "http.request":
                body += message["body"]
                if not message["more_body"]:
                    break
        except Overloaded as exc:
            await send({"type": "http.response.start", "status": exc.status_code, "headers": []})
            await send({"type": "http.response.body", "body": exc.message.encode()})
            return
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


class Switch:
    """Hands each request to the app it holds now."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        await self.app(scope, receive, send)


def part(body: bytes, more: bool = True) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


def test_stalled_bodies_take_no_in_flight_slot():
    async def scenario():
        app = gated(ReadingApp(), limit=2, reading_limit=10)
        stalled = [asyncio.create_task(call(app, "/serve/minilm", messages=(part(b"{"),))) for _ in range(5)]
        await asyncio.sleep(0)
        assert (app.gate.reading, app.gate.inflight) == (5, 0)
        for _ in range(3):
            assert (await call(app, "/serve/minilm"))[0]["status"] == 200
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)
        assert (app.gate.reading, app.gate.inflight) == (0, 0), "a request cancelled while reading frees its place"

    asyncio.run(scenario())


def test_past_the_reading_bound_requests_get_503_and_the_connection_closed():
    async def scenario():
        app = gated(ReadingApp(), limit=2, reading_limit=3, retry_after=4)
        stalled = [asyncio.create_task(call(app, "/v1/embeddings", messages=(part(b"{"),))) for _ in range(3)]
        await asyncio.sleep(0)
        refused = await call(app, "/serve/minilm")
        for task in stalled:
            task.cancel()
        return refused

    start, body = asyncio.run(scenario())
    headers = dict(start["headers"])
    assert start["status"] == 503 and headers[b"retry-after"] == b"4" and headers[b"connection"] == b"close"
    error = orjson.loads(body["body"])["error"]
    assert error["type"] == "overloaded" and "3 requests still sending their bodies" in error["message"]
    assert "MAX_READING" in error["message"]


def test_a_body_in_several_chunks_is_admitted_at_its_last_chunk():
    async def scenario():
        inner = ReadingApp()
        app = gated(inner, limit=1, reading_limit=5, retry_after=2)
        chunks = (part(b'{"te'), part(b'xt": '), part(b'"a"}', more=False))
        assert (await call(app, "/serve/minilm", messages=chunks))[0]["status"] == 200
        assert inner.bodies == [b'{"text": "a"}']
        held = HeldApp()
        switch = Switch(held)
        app = gated(switch, limit=1, reading_limit=5, retry_after=2)
        holder = asyncio.create_task(call(app, "/serve/minilm"))
        await asyncio.sleep(0)
        switch.app = inner  # the slot is held; the next request reads its body in chunks and finds the bound full
        refused = await call(app, "/serve/minilm", messages=chunks)
        assert refused[0]["status"] == 429 and b"its limit (SERVING_MAX_INFLIGHT)" in refused[1]["body"]
        assert (app.gate.reading, app.gate.inflight) == (0, 1)
        held.release.set()
        await holder
        assert (app.gate.reading, app.gate.inflight) == (0, 0)

    asyncio.run(scenario())


def test_a_client_gone_before_its_body_came_is_not_handed_to_the_app():
    async def scenario():
        inner = ReadingApp()
        app = gated(inner, limit=1)
        sent = await call(app, "/serve/minilm", messages=({"type": "http.disconnect"},))
        assert (app.gate.reading, app.gate.inflight, inner.bodies) == (0, 0, [])
        return sent

    start, _ = asyncio.run(scenario())
    assert start["status"] == 499, "counted as nginx does (client closed request), not as a server error"
