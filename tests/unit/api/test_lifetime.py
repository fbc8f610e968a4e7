"""A request's lifetime at the edge (`services.api.lifetime`), driven through ASGI by hand: a deadline cancels the
request's work and answers 504; a client that leaves, while its body arrives or after, cancels the work, answers
nothing (499 for the metrics) and is logged at INFO without a traceback; a quick request costs no watcher task."""

import asyncio
import logging
import math
import time

import orjson
import pytest

from services.api.lifetime import Lifetimes
from services.common.deadline import deadline_var

FOREVER = math.inf
"""The length of work that only a cancellation ends: a request that returns at all did not wait for it."""


class App:
    """Reads the body, then works `seconds` (the work a disconnect or a deadline must cancel) and answers 200."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.cancelled = False
        self.deadline = None

    async def __call__(self, scope, receive, send):
        while (await receive()).get("more_body", False):
            pass
        self.deadline = deadline_var.get()
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})


def scope(headers=()):
    return {"type": "http", "method": "POST", "path": "/serve/minilm", "headers": list(headers)}


class Client:
    """The connection's side: the body's chunks, then (if `leave_after` is set) a disconnect that many seconds after
    the body; `stall` keeps the body unfinished (its client never sends the rest)."""

    def __init__(self, leave_after: float | None = None, stall: bool = False):
        self.messages = [{"type": "http.request", "body": b"{}", "more_body": stall}]
        self.leave_after = leave_after
        self.stall = stall
        self.sent: list[dict] = []

    async def receive(self):
        if self.messages:
            return self.messages.pop(0)
        if self.leave_after is None:
            await asyncio.Event().wait()  # a client that stays
        await asyncio.sleep(self.leave_after)
        return {"type": "http.disconnect"}

    async def send(self, message):
        self.sent.append(message)

    @property
    def status(self):
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), None)


def serve(app, client, headers=(), default_timeout=60.0):
    async def run():
        start = time.monotonic()
        await Lifetimes(default_timeout).run(app, scope(headers), client.receive, client.send)
        return time.monotonic() - start

    return asyncio.run(run())


def test_a_quick_request_is_answered_as_is_and_carries_its_deadline():
    app, client = App(0.0), Client()
    before = time.monotonic()
    serve(app, client, [(b"x-request-timeout", b"2.5")])
    after = time.monotonic()
    assert client.status == 200 and not app.cancelled
    assert before + 2.5 <= app.deadline <= after + 2.5, "2.5 s from the request's arrival"


def test_the_deadline_header_cancels_the_work_and_answers_504_in_time(caplog):
    app, client = App(FOREVER), Client()
    with caplog.at_level(logging.INFO, "services.api.lifetime"):
        took = serve(app, client, [(b"x-request-timeout", b"0.2")])
    assert client.status == 504 and app.cancelled  # answered at all: the work that never ends was not waited for
    assert took >= 0.2, f"answered after {took:.2f} s, before the deadline"
    error = orjson.loads(client.sent[1]["body"])["error"]
    assert error["type"] == "deadline_exceeded" and "0.2 s" in error["message"]
    assert [r.levelno for r in caplog.records] == [logging.INFO]


def test_the_servers_default_deadline_applies_and_a_longer_header_cannot_extend_it():
    app, client = App(FOREVER), Client()
    took = serve(app, client, [(b"x-request-timeout", b"30")], default_timeout=0.2)
    assert client.status == 504 and 0.2 <= took < 30, f"answered after {took:.2f} s, not at the server's deadline"


@pytest.mark.parametrize("value", [b"soon", b"-1", b"0", b"nan", b"inf"])
def test_a_deadline_header_that_is_not_a_positive_number_is_400(value):
    app, client = App(0.0), Client()
    serve(app, client, [(b"x-request-timeout", value)])
    assert client.status == 400
    error = orjson.loads(client.sent[1]["body"])["error"]
    assert error["param"] == "x-request-timeout" and error["message"].endswith(f"not '{value.decode()}'")


def test_a_client_leaving_after_its_body_cancels_the_work_logged_at_info_without_a_traceback(caplog):
    app, client = App(FOREVER), Client(leave_after=0.1)
    with caplog.at_level(logging.INFO):
        serve(app, client)
    assert app.cancelled, "the work (which never ends) was cancelled when the client left"
    assert client.status == 499, "nothing reaches the closed connection; the access metrics count 499"
    records = [r for r in caplog.records if r.name == "services.api.lifetime"]
    assert len(records) == 1 and records[0].levelno == logging.INFO and records[0].exc_info is None
    assert "the client left before its answer" in records[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_client_leaving_while_its_body_arrives_ends_the_request_at_info(caplog):
    app, client = App(0.0), Client(leave_after=0.05, stall=True)
    with caplog.at_level(logging.INFO):
        serve(app, client)
    assert client.status == 499
    (record,) = [r for r in caplog.records if r.name == "services.api.lifetime"]
    assert record.levelno == logging.INFO and record.exc_info is None
    assert "while its body was arriving" in record.getMessage()


def test_a_quick_request_starts_no_watcher_task():
    app, client = App(0.0), Client()

    async def run():
        before = len(asyncio.all_tasks())
        counts = []
        original = client.send

        async def send(message):
            counts.append(len(asyncio.all_tasks()))
            await original(message)

        await Lifetimes(60.0).run(app, scope(), client.receive, send)
        return before, counts

    before, counts = asyncio.run(run())
    assert set(counts) == {before}, "only a timer until the request has run a while"
