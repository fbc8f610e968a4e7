"""Admission: bound the inference requests one worker works on at once, and turn the rest away as cheaply as possible.

A request counts toward the in-flight bound (`max_inflight`) once its body has arrived in full, not from its
headers, so connections that send their headers and then stall hold no slot (docs/decisions/request-bounds.md).
Requests still sending their bodies have a bound
of their own (`max_reading`, larger: each costs a task and a partial body), and the protocol's read deadline (408,
`services.api.http_limits`) ends them.

Past the in-flight bound a request gets 429, past the reading bound 503 (and the connection closed: its body need
not be read), both with Retry-After and before anything else is spent: no body parsed, no route resolved, the answer
encoded once per worker, only the request id spliced in. Under overload most requests are refused, so what a
refusal costs is capacity taken from the admitted ones (measured by `loadtest overload`). A body that arrives in one
read (nearly all do) is there when the request reaches the gate, which takes or refuses its slot at once; a body
that comes in several is admitted when the handler reads its last chunk, and refused there with `Overloaded`, which
the handler answers like its other errors. The gate is a step of the edge (`services.api.edge`), after the API key
and before the request's lifetime.
"""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from observability import metrics
from observability.logging import request_id_var
from observability.tally import TALLY
from services.common.errors import Overloaded

_GONE = (
    {"type": "http.response.start", "status": 499, "headers": [(b"content-length", b"0")]},
    {"type": "http.response.body", "body": b""},
)
"""What a request whose client left before its body came "answers": nothing reaches the closed connection, and the
access metrics count it as nginx does (499, client closed request) rather than as a server error."""


class _Refusal:
    """A refusal's JSON up to its last field, the request id: the body is head + the id + b"}}"."""

    def __init__(self, status: int, message: str, retry_after: int, close: bool):
        error = {"message": message, "type": "overloaded", "code": status, "request_id": None}
        self.head = orjson.dumps({"error": error})[: -len(b"null}}")]
        self.status = status
        self.message = message
        self.headers = [(b"content-type", b"application/json"), (b"retry-after", str(retry_after).encode())]
        if close:
            self.headers.append((b"connection", b"close"))

    async def send(self, send: Send) -> None:
        body = self.head + orjson.dumps(request_id_var.get()) + b"}}"
        headers = [*self.headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class Gate:
    """One per worker: the requests reading their bodies and those in flight, and the two refusals."""

    def __init__(self, limit: int, reading_limit: int | None = None, retry_after: int = 1):
        self.limit = limit
        self.reading_limit = 4 * limit if reading_limit is None else reading_limit
        self.inflight = 0
        self.reading = 0
        self.retry_after = retry_after
        self.busy = _Refusal(
            429,
            f"this worker is handling {limit} requests, its limit (SERVING_MAX_INFLIGHT); retry after "
            f"{retry_after} s, or add workers",
            retry_after,
            close=False,
        )
        self.crowded = _Refusal(
            503,
            f"this worker has {self.reading_limit} requests still sending their bodies, its limit "
            f"(SERVING_MAX_READING); retry after {retry_after} s",
            retry_after,
            close=True,
        )

    def enter(self) -> None:
        """Take an in-flight slot for a request that arrived whole (a gRPC message); Overloaded (429) when full."""
        if self.inflight >= self.limit:
            raise Overloaded(self.busy.message, retry_after=self.retry_after)
        self.inflight += 1
        TALLY.inc(metrics.INFLIGHT)

    def leave(self) -> None:
        """Give back the slot `enter` took."""
        self.inflight -= 1
        TALLY.inc(metrics.INFLIGHT, -1.0)

    async def admit(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the inference request through `app` once admitted; refuse it (429, 503) or drop it (client gone)."""
        if self.reading >= self.reading_limit:
            return await self.crowded.send(send)
        arrival = _Arrival(self, receive)
        try:
            first = await receive()
            if first["type"] != "http.request":  # gone before its body came (or past the read deadline)
                arrival.arrived(admit=False)
                for message in _GONE:
                    await send(message)
                return
            if not first.get("more_body", False) and not arrival.arrived():
                return await self.busy.send(send)
            arrival.first = first
            await app(scope, arrival.receive, send)
        finally:
            arrival.leave()


class _Arrival:
    """One inference request on its way through admission: reading its body, then in flight, then done."""

    __slots__ = ("gate", "upstream", "first", "reading", "inflight")

    def __init__(self, gate: Gate, receive: Receive):
        self.gate = gate
        self.upstream = receive
        self.first: Message | None = None
        """The message admission read, handed to the app's first receive()."""
        self.reading = True
        self.inflight = False
        gate.reading += 1

    async def receive(self) -> Message:
        if self.first is not None:
            message, self.first = self.first, None
            return message
        message = await self.upstream()
        if self.reading and not message.get("more_body", False):
            admit = message["type"] == "http.request"
            if not self.arrived(admit) and admit:
                raise Overloaded(self.gate.busy.message, retry_after=self.gate.retry_after)
        return message

    def arrived(self, admit: bool = True) -> bool:
        """The body is in (or the client gone): no longer reading; take an in-flight slot. False: the bound is full."""
        gate = self.gate
        self.reading = False
        gate.reading -= 1
        if not admit or gate.inflight >= gate.limit:
            return False
        self.inflight = True
        gate.inflight += 1
        TALLY.inc(metrics.INFLIGHT)
        return True

    def leave(self) -> None:
        gate = self.gate
        if self.reading:
            self.reading = False
            gate.reading -= 1
        if self.inflight:
            self.inflight = False
            gate.inflight -= 1
            TALLY.inc(metrics.INFLIGHT, -1.0)
