"""The workers' HTTP protocol (`services.api.http_limits`) fed bytes directly: the head's size bound is exact across
reads, a request's body may come in the same read as its head, and the read deadline answers 408 to a request not in
full in time (whether its head or its body is late), and never to one that arrived. Every scenario runs on a virtual
clock (`tests.support.virtual_clock`): its sleeps and the protocol's deadlines are exact whatever the machine's load."""

from __future__ import annotations

import asyncio

import orjson
from uvicorn.config import Config
from uvicorn.server import ServerState

from services.api.http_limits import DRAIN_LINGER, LIMITS_KEY, GuardedHttpToolsProtocol, HttpLimits
from tests.support import virtual_clock


class Transport:
    def __init__(self):
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        if not self.closed:  # as a socket's: what is written after close() never leaves
            self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 40000)}.get(name)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class EchoApp:
    """Reads the whole body (or learns the client is gone), then answers with the body's length."""

    def __init__(self):
        self.seen: list[dict | bytes] = []

    async def __call__(self, scope, receive, send):
        body = b""
        while (message := await receive())["type"] == "http.request":
            body += message["body"]
            if not message["more_body"]:
                break
        self.seen.append(body if message["type"] == "http.request" else message)
        answer = str(len(body)).encode()
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(answer))]}
        )
        await send({"type": "http.response.body", "body": answer})


def connection(app, limits: HttpLimits) -> tuple[GuardedHttpToolsProtocol, Transport]:
    config = Config(app=app, lifespan="off", log_config=None, proxy_headers=False)
    protocol = GuardedHttpToolsProtocol(config, ServerState(), {LIMITS_KEY: limits}, asyncio.get_running_loop())
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


def head_of(size: int, extra: bytes = b"") -> bytes:
    """A request head of exactly `size` bytes (request line and headers, blank line included)."""
    start = b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\n" + extra + b"X-Pad: "
    return start + b"p" * (size - len(start) - 4) + b"\r\n\r\n"


def feed(protocol, data: bytes, piece: int) -> None:
    for at in range(0, len(data), piece):
        if not protocol.transport.is_closing():
            protocol.data_received(data[at : at + piece])


def test_a_head_at_the_limit_passes_and_one_byte_more_gets_431():
    async def scenario(size: int, piece: int):
        app = EchoApp()
        protocol, transport = connection(app, HttpLimits(max_header_bytes=1024))
        feed(protocol, head_of(size), piece)
        await asyncio.sleep(0.01)
        return app, transport

    for piece in (1, 100, 1024, 4096):
        app, transport = virtual_clock.run(scenario(1024, piece))
        assert transport.written.startswith(b"HTTP/1.1 200 ") and app.seen == [b""] and not transport.closed
        app, transport = virtual_clock.run(scenario(1025, piece))
        assert transport.written.startswith(b"HTTP/1.1 431 ") and transport.closed and app.seen == []
        body = transport.written.split(b"\r\n\r\n", 1)[1]
        assert orjson.loads(body)["error"]["type"] == "header_too_large"
        assert b"connection: close\r\n" in transport.written


def test_a_body_may_share_a_read_with_its_head_whatever_its_size():
    async def scenario():
        app = EchoApp()
        protocol, transport = connection(app, HttpLimits(max_header_bytes=1024))
        body = b"b" * 5000
        request = head_of(900, b"Content-Length: %d\r\n" % len(body)) + body
        protocol.data_received(request + request)  # two requests, keep-alive and pipelined, in one read
        await asyncio.sleep(0.01)
        assert protocol.read_deadline is None, "a request that arrived in one read arms no timer"
        feed(protocol, request, 700)  # and a third over several reads: its head is counted from zero
        await asyncio.sleep(0.01)
        return app, transport

    app, transport = virtual_clock.run(scenario())
    assert app.seen == [b"b" * 5000] * 3 and transport.written.count(b"HTTP/1.1 200 ") == 3


def test_a_request_late_in_its_head_or_its_body_gets_408_at_the_deadline():
    async def scenario(sent: bytes):
        app = EchoApp()
        protocol, transport = connection(app, HttpLimits(read_timeout=0.05))
        protocol.data_received(sent)
        await asyncio.sleep(0.03)
        early = transport.written
        await asyncio.sleep(0.05)
        return app, transport, early

    late_head = b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nX-Slow: "
    late_body = b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n{"
    for sent in (late_head, late_body):
        app, transport, early = virtual_clock.run(scenario(sent))
        assert early == b"" and transport.written.startswith(b"HTTP/1.1 408 ") and transport.closed
        assert orjson.loads(transport.written.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "request_timeout"
        assert transport.written.count(b"HTTP/1.1") == 1, "the app's own answer goes nowhere"
    assert app.seen == [{"type": "http.disconnect"}], "the app waiting for the body learns the client is gone"


def test_a_request_that_arrived_is_never_timed_out():
    async def scenario():
        app = EchoApp()
        protocol, transport = connection(app, HttpLimits(read_timeout=0.05))
        request = b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\n"
        protocol.data_received(request + b"ab")
        await asyncio.sleep(0.01)
        protocol.data_received(b"cd")  # the body's end, well within the deadline
        await asyncio.sleep(0.1)  # past the deadline, on a kept-alive idle connection
        return app, transport

    app, transport = virtual_clock.run(scenario())
    assert app.seen == [b"abcd"] and transport.written.startswith(b"HTTP/1.1 200 ") and not transport.closed


def test_pipelined_requests_over_the_head_bound_in_one_read_are_all_answered():
    """Many small requests sent back to back in one read add up to more than max_header_bytes: none of their heads
    is over it, so every one is answered and the connection stays open."""

    async def scenario():
        app = EchoApp()
        protocol, transport = connection(app, HttpLimits(max_header_bytes=1024))
        protocol.data_received(head_of(300) * 5)  # 1,500 bytes in one read
        for _ in range(50):
            await asyncio.sleep(0.01)
            if transport.written.count(b"HTTP/1.1 200 ") == 5:
                break
        return app, transport

    app, transport = virtual_clock.run(scenario())
    assert transport.written.count(b"HTTP/1.1 200 ") == 5 and not transport.closed
    assert app.seen == [b""] * 5


def test_a_big_body_arriving_slowly_but_steadily_gets_its_allowance():
    """The deadline grows with a declared body (its length at min_body_rate): a 1,000-byte body at 10 kB/s has
    0.1 s more than read_timeout, so it is answered 200 past read_timeout; a stalled one still gets 408."""

    async def scenario(rate_limited: bool):
        app = EchoApp()
        protocol, transport = connection(app, HttpLimits(read_timeout=0.05, min_body_rate=10_000))
        protocol.data_received(b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n")
        if rate_limited:
            for _ in range(10):
                await asyncio.sleep(0.009)  # 100 bytes every 9 ms: 0.09 s in all, past read_timeout
                protocol.data_received(b"x" * 100)
        await asyncio.sleep(0.2)
        return app, transport

    app, transport = virtual_clock.run(scenario(True))
    assert transport.written.startswith(b"HTTP/1.1 200 ") and app.seen == [b"x" * 1000]
    app, transport = virtual_clock.run(scenario(False))
    assert transport.written.startswith(b"HTTP/1.1 408 ") and transport.closed


def test_a_connection_that_sends_nothing_is_closed_at_the_read_deadline_and_one_that_speaks_is_not():
    async def scenario():
        silent = connection(EchoApp(), HttpLimits(read_timeout=0.5))[1]
        protocol, talking = connection(EchoApp(), HttpLimits(read_timeout=0.5))
        protocol.data_received(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        await asyncio.sleep(0.05)
        early = silent.closed
        await asyncio.sleep(1.0)
        return silent, talking, early

    silent, talking, early = virtual_clock.run(scenario())
    assert not early and silent.closed and silent.written == b"", "closed at the deadline, without an answer"
    assert talking.written.startswith(b"HTTP/1.1 200 ") and not talking.closed


class SlowApp(EchoApp):
    """Answers each request `delay` seconds after its body has arrived: a response still running while the next
    requests arrive."""

    def __init__(self, delay: float):
        super().__init__()
        self.delay = delay

    async def __call__(self, scope, receive, send):
        await asyncio.sleep(self.delay)
        await super().__call__(scope, receive, send)


VALID = b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nab"
BAD_CHUNK = b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"


def test_requests_pipelined_ahead_of_a_malformed_one_are_answered_before_its_400():
    """A bad request line, a bad chunk size in a queued request's body, a head over the bound: each is refused (JSON,
    connection closed) only after every request before it on the connection got its whole answer, whether those
    answers were still running or not yet started when the bad bytes arrived."""

    async def scenario(app, data: bytes, limits: HttpLimits = HttpLimits()):
        protocol, transport = connection(app, limits)
        protocol.data_received(data)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if transport.closed:
                break
        return transport

    cases = [
        (VALID * 2 + b"NOT HTTP AT ALL\r\n\r\n", HttpLimits(), 400, "bad_request"),
        (VALID * 2 + BAD_CHUNK, HttpLimits(), 400, "bad_request"),
        (VALID * 2 + head_of(2000), HttpLimits(max_header_bytes=1024), 431, "header_too_large"),
    ]
    for data, limits, status, error_type in cases:
        for app in (EchoApp(), SlowApp(0.05)):
            transport = virtual_clock.run(scenario(app, data, limits))
            answers = transport.written.split(b"HTTP/1.1 ")[1:]
            assert [a[:3] for a in answers] == [b"200", b"200", b"%d" % status], (data[-40:], transport.written)
            assert all(a.endswith(b"\r\n\r\n2") for a in answers[:2]), "both answers in full, bodies included"
            assert orjson.loads(answers[2].split(b"\r\n\r\n", 1)[1])["error"]["type"] == error_type
            assert transport.closed and app.seen == [b"ab", b"ab"]


def test_a_stopping_worker_answers_an_idle_connections_next_request_then_closes_it_and_an_unused_one_later():
    """Before: uvicorn closed an idle kept-alive connection the moment its worker stopped, and a request a client was
    sending on it that moment got no answer (seen once in a rolling restart under load)."""

    async def scenario():
        protocol, used = connection(EchoApp(), HttpLimits())
        unused_protocol, unused = connection(EchoApp(), HttpLimits())
        protocol.data_received(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        await asyncio.sleep(0.01)
        protocol.shutdown()
        unused_protocol.shutdown()
        open_after_stop = not used.closed and not unused.closed
        protocol.data_received(b"GET /health/live HTTP/1.1\r\nHost: t\r\n\r\n")  # on its way as the worker stopped
        await asyncio.sleep(0.01)
        used_closed, unused_closed_early = used.closed, unused.closed
        await asyncio.sleep(DRAIN_LINGER)
        return used, unused, open_after_stop, used_closed, unused_closed_early

    used, unused, open_after_stop, used_closed, unused_closed_early = virtual_clock.run(scenario())
    answers = used.written.split(b"HTTP/1.1 200 ")
    assert open_after_stop and len(answers) == 3, "both requests answered"
    assert b"connection: close" in answers[-1].lower() and used_closed, "the last one says so, then it is closed"
    assert not unused_closed_early and unused.closed and unused.written == b"", "an unused one closed after the linger"
