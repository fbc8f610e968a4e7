"""The HTTP/1.1 connection as the workers run it: uvicorn's httptools protocol with the two limits it lacks.

uvicorn 0.54 bounds neither the size of a request's head nor the time a request may take to arrive: its
`h11_max_incomplete_event_size` applies to the h11 protocol only, and httptools (llhttp) has no limit of its own
(what that cost: docs/decisions/request-bounds.md).

This protocol counts the bytes of each request head as they arrive, before the parser sees them, and answers 431
once the request line and headers pass `max_header_bytes`; and a request not in full (head and body) `read_timeout`
seconds after its first byte (plus, for a declared body, its length at `min_body_rate`) gets 408. Both answers close
the connection. A connection that sends nothing at all is closed, without an answer, `read_timeout` seconds after it
opened (uvicorn's keep-alive timeout starts only after a first response). A request that arrives in one read
costs no more than a few attribute updates: the deadline's timer is armed only for a request still incomplete when
a read ends. The bound on the head and the deadline start with the
first read that holds only the request's own bytes: a pipelined request whose head begins in the read that ends the
one before it is measured from the next read.

A request the parser cannot read (400) or whose head is over the bound (431) ends the connection, but only after the
requests before it on the connection got their whole answers: the refusal waits for the last of them
(`on_response_complete`), and the bytes after the bad ones are dropped meanwhile.

A stopping worker (`shutdown`) closes an idle kept-alive connection only after `DRAIN_LINGER` seconds, answering a
request that arrives meanwhile with `Connection: close`: closed at once, a request already on its way got no answer.

The app sets the limits from its settings in its lifespan state (`LIMITS_KEY`), which uvicorn hands to every
connection's protocol; without them (another server, a test app) the defaults below apply.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

log = logging.getLogger(__name__)
DRAIN_LINGER = 1.0
"""Seconds a stopping worker keeps an idle kept-alive connection open for one last request (`shutdown`)."""
SERVER_LOG = logging.getLogger("uvicorn.error")
"""Where uvicorn's protocol writes its lines, the ones about a client's request among them."""
SERVER_REQUEST_LINES = {
    "Invalid HTTP request received.": 400,
    "Unsupported upgrade request.": 400,
    "No supported WebSocket library detected. Please use \"pip install 'uvicorn[standard]'\", or install "
    "'websockets' or 'wsproto' manually.": 400,
    "Exception in ASGI application\n": 500,
}
"""uvicorn's lines that a client's request writes (each new connection may repeat them), with the status it got."""

LIMITS_KEY = "http_limits"
"""The lifespan state key under which the app gives the protocol its `HttpLimits`."""


@dataclass(frozen=True)
class HttpLimits:
    max_header_bytes: int = 64 * 1024
    """Request line and headers together at most (nginx's default buffers hold 32 KiB, Node.js takes 16 KiB)."""
    read_timeout: float = 10.0
    """Seconds from a request's first byte to its last, plus the body's allowance below."""
    min_body_rate: float = 64 * 1024
    """Bytes a second a declared body must at least arrive at: a body of N bytes gets N / min_body_rate seconds more
    (a 1 MiB upload over a slow link is not a stalled client)."""


@cache
def _refusal(status: int, error_type: str, message: str) -> bytes:
    """The JSON answer after the status line and the server's default headers: encoded once per worker."""
    body = orjson.dumps({"error": {"message": message, "type": error_type, "code": status}})
    return b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%b" % (len(body), body)


class ServerLineStatus(logging.Filter):
    """Marks uvicorn's lines about a client's request (`SERVER_REQUEST_LINES`) with the status the request got, so
    that the repeat limit on its logger (`observability.repeats`) counts them as it counts the completion lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = SERVER_REQUEST_LINES.get(record.msg) if isinstance(record.msg, str) else None
        if status is not None and not hasattr(record, "status"):
            record.status = status
        return True


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits: HttpLimits = app_state.get(LIMITS_KEY) or HttpLimits()
        self.head_bytes = 0
        self.reading_head = True
        """The next bytes belong to a request's head (also between requests)."""
        self.read_deadline: asyncio.TimerHandle | None = None
        self.completed = 0
        """Requests parsed in full on this connection: tells a head over the bound from pipelined requests."""
        self.started = 0.0
        """When the request now arriving began (loop time), once its deadline is armed."""
        self.allowance = 0.0
        """Seconds its declared body adds to the deadline."""
        self.silence: asyncio.TimerHandle | None = None
        """Closes a connection that has sent no byte yet `read_timeout` seconds after it opened."""
        self.refusal: bytes | None = None
        """A 400 or 431 held back until the answers to the requests before it are sent; then the connection ends."""
        self.draining = False
        """The worker is stopping (`shutdown`): the next answer on this connection is its last."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(cast(asyncio.Transport, transport))  # the loop's stream transports are Transports
        self.silence = self.loop.call_later(self.limits.read_timeout, self._silent)

    def _silent(self) -> None:
        self.silence = None
        if not self.transport.is_closing():
            log.info(
                "closed %s: it sent nothing in %g s", self._peer(), self.limits.read_timeout, extra={"status": 408}
            )
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.silence is not None:
            self.silence.cancel()
            self.silence = None
        if self.refusal is not None:  # the connection ends once the earlier answers are out: nothing more is read
            return
        if self.reading_head:
            room = self.limits.max_header_bytes - self.head_bytes
            if len(data) > room:
                completed = self.completed
                super().data_received(data[:room])  # the head may end within what fits
                if self.transport.is_closing() or self.refusal is not None:
                    return
                if self.reading_head:
                    if self.completed == completed:
                        return self._refuse_head()
                    # pipelined: a request ended within what fitted and the next one's head began; the rest is
                    # counted afresh (the bytes of that head already fed are not: fewer than max_header_bytes)
                    return self.data_received(data[room:])
                data = data[room:]
            else:
                self.head_bytes += len(data)
        super().data_received(data)
        if (
            (not self.reading_head or self.head_bytes)  # self._incomplete(), inlined: every read passes here
            and self.read_deadline is None
            and self.refusal is None
            and not self.transport.is_closing()
        ):
            self.started = self.loop.time()
            self.read_deadline = self.loop.call_later(self.limits.read_timeout, self._read_timed_out)

    def _incomplete(self) -> bool:
        """A request has begun and not ended: its body is due, or bytes of its head were counted."""
        return not self.reading_head or self.head_bytes > 0

    def on_headers_complete(self) -> None:
        self.reading_head = False
        self.head_bytes = 0
        declared = next((value for name, value in self.headers if name == b"content-length"), b"")
        self.allowance = int(declared) / self.limits.min_body_rate if declared.isdigit() and len(declared) < 19 else 0.0
        super().on_headers_complete()
        if self.draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answered with `Connection: close`, then closed

    def shutdown(self) -> None:
        """The worker stops (SIGTERM, `serving reload`): a request under way is answered, then its connection closes
        (uvicorn's own). An idle kept-alive connection is not closed at once, where a client may be sending its next
        request this moment and would get no answer at all: that request, within `DRAIN_LINGER` seconds, is answered
        with `Connection: close`; a connection that sends none by then is closed."""
        self.draining = True
        if self.cycle is None or self.cycle.response_complete:
            self.loop.call_later(DRAIN_LINGER, self._close_idle)
        else:
            self.cycle.keep_alive = False

    def _close_idle(self) -> None:
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()

    def on_message_complete(self) -> None:
        self.completed += 1
        self.allowance = 0.0
        self.reading_head = True
        self.head_bytes = 0
        self._cancel_deadline()
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser cannot read, as JSON and after the earlier requests' answers."""
        message = (
            "the request is not valid HTTP/1.1: check the request line, the headers and the body's framing "
            "(Content-Length or chunked), and send requests one after the other"
        )
        self._refuse(400, _refusal(400, "bad_request", message))

    def on_response_complete(self) -> None:
        if self.refusal is not None and not self.pipeline and not self.transport.is_closing():
            # the last answer owed before the refusal is out: send it and end (uvicorn's part then sees the closing)
            self.transport.write(self.refusal)
            self.transport.close()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        if self.silence is not None:
            self.silence.cancel()
            self.silence = None
        super().connection_lost(exc)

    def _cancel_deadline(self) -> None:
        if self.read_deadline is not None:
            self.read_deadline.cancel()
            self.read_deadline = None

    def _previous_response_running(self) -> bool:
        """While a request's head arrives, `cycle` is the previous request's: a pipelined one may still answer."""
        return self.reading_head and self.cycle is not None and not self.cycle.response_complete

    def _answers_owed(self) -> bool:
        """Whether requests before the one being refused still owe their answers. The refused one's own cycle,
        when its head had ended and it waits in the pipeline, never runs: it is taken out."""
        if self.reading_head:
            return self._previous_response_running()
        queued = self.pipeline and self.pipeline[0][0] is self.cycle  # the newest request waits its turn
        if queued:
            self.pipeline.popleft()
        return bool(queued)

    def _refuse(self, status: int, rest: bytes) -> None:
        """Answer `status` and close now, or, while earlier requests' answers are owed, once the last is sent."""
        self._cancel_deadline()
        if self._answers_owed():
            self.refusal = self._status_and_headers(status) + rest
            self.flow.pause_reading()
            return
        self._answer_and_close(status, rest)

    def _refuse_head(self) -> None:
        limit = self.limits.max_header_bytes
        log.info("431 to %s: request line and headers over %d bytes", self._peer(), limit, extra={"status": 431})
        message = (
            f"the request line and headers are over {limit} bytes, this server's limit "
            "(SERVING_MAX_HEADER_BYTES): send fewer or shorter headers, and long inputs in the body"
        )
        self._refuse(431, _refusal(431, "header_too_large", message))

    def _read_timed_out(self) -> None:
        self.read_deadline = None
        if not self._incomplete() or self.transport.is_closing() or self.refusal is not None:
            return
        if self.flow.read_paused or self._previous_response_running():
            # the server is the one not reading (a pipelined request waits its turn, the app has not taken the
            # body yet): not the client's delay
            self.read_deadline = self.loop.call_later(self.limits.read_timeout, self._read_timed_out)
            return
        due = self.started + self.limits.read_timeout + self.allowance
        if not self.reading_head and self.loop.time() < due:  # a big declared body: its allowance is not over
            self.read_deadline = self.loop.call_later(due - self.loop.time(), self._read_timed_out)
            return
        timeout = self.limits.read_timeout
        what = "408 to %s: the request was not in full %g s after its first byte"
        log.info(what, self._peer(), timeout, extra={"status": 408})
        cycle = None if self.reading_head else self.cycle
        if cycle is not None:
            if cycle.response_started:  # the app answered without waiting for the body (413, 429...)
                self.transport.close()
                return
            cycle.disconnected = True  # the app's receive() now says http.disconnect and its answer goes nowhere
            cycle.message_event.set()
        message = (
            f"the request did not arrive in full within {timeout:g} s of its first byte, this server's limit "
            "(SERVING_READ_TIMEOUT): send the headers and the body without pauses"
        )
        self._answer_and_close(408, _refusal(408, "request_timeout", message))

    def _status_and_headers(self, status: int) -> bytes:
        head = [STATUS_LINE[status]]
        head += [b"%b: %b\r\n" % pair for pair in self.server_state.default_headers]
        return b"".join(head)

    def _answer_and_close(self, status: int, rest: bytes) -> None:
        self.transport.write(self._status_and_headers(status) + rest)
        self.transport.close()

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
