"""A request's lifetime at the edge: its deadline, and the end of its work once its client has gone.

Every inference request carries a deadline and is watched, so that work whose client has gone or whose time is up
stops holding the worker (docs/decisions/request-bounds.md):

- Deadline: the caller's `x-request-timeout` header, in seconds (a decimal number, as the timeout the caller itself
  will give up after), or the server's `request_timeout` (`SERVING_REQUEST_TIMEOUT`), the shorter of the
  two, counted from when the request reaches the app. Past it the request's work is cancelled and it is answered
  504. Until then the stages that wait read what is left (`services.common.deadline`): the token budget's queue, and
  Triton, whose gRPC deadline is the time left.
- Disconnect: a client that closes its connection cancels its request wherever it is, and nothing is answered. What
  has not started is dropped: the request's place in the token budget's queue, its texts in a coalesced batch not
  yet sent (`services.api.coalesce`), its tokenization still queued for a thread, its Triton call (gRPC cancels it
  in Triton too). In the FastAPI stack an ONNX Runtime run under way is stopped as well
  (`services.fastapi_stack.backend`). It is logged at INFO, one line, and counted in the access metrics as 499
  (nginx's "client closed request"), not as an error with a traceback.

ASGI tells the app of a disconnect only through `receive()`, which has nothing more to say once the body is read, so
a task waits on it. Most requests are answered within milliseconds, so that task is started only for a request still
running `WATCH_AFTER` seconds after it came; a client that left before then is noticed then. A disconnect while the
body is arriving is noticed by the reader itself. One timer per worker checks the running requests every `TICK`
seconds while there are any (a timer per request cost more than the rest of this module together): a deadline is
kept to within `TICK`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.errors import error_response
from services.api.paths import shown_path
from services.common.deadline import deadline_var
from services.common.errors import BadRequest, DeadlineExceeded

log = logging.getLogger(__name__)

TIMEOUT_HEADER = b"x-request-timeout"
TICK = 0.025
"""Seconds between two checks of the running requests (deadlines are kept to within this)."""
WATCH_AFTER = 0.05
"""Seconds a request runs before a task starts watching its connection."""
GONE, LATE = "gone", "late"
_CLIENT_CLOSED = (
    {"type": "http.response.start", "status": 499, "headers": [(b"content-length", b"0")]},
    {"type": "http.response.body", "body": b""},
)
"""Sent to a closed connection (the server drops it): only the access metrics see the status."""


def requested_timeout(headers: list[tuple[bytes, bytes]]) -> float | None:
    """The caller's `x-request-timeout` in seconds; None without one. 400 if it is not a positive number."""
    for name, value in headers:
        if name == TIMEOUT_HEADER:
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if not 0 < seconds < float("inf"):
                raise BadRequest(
                    "header x-request-timeout must be a positive number of seconds, not "
                    f"{value[:40].decode('latin-1')!r}",
                    param="x-request-timeout",
                )
            return seconds
    return None


def _route(scope: Scope) -> tuple[str, str]:
    return scope["method"], shown_path(scope["path"])


class Lifetimes:
    """One per worker: the inference requests running, watched by one timer. A step of the edge
    (`services.api.edge`), after admission: only admitted requests are watched."""

    def __init__(self, default_timeout: float):
        self.default_timeout = default_timeout
        self.active: set[_Watch] = set()
        self._ticker: asyncio.TimerHandle | None = None

    async def run(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """The request through `app` under its deadline, ended when its client leaves."""
        try:
            asked = requested_timeout(scope["headers"])
        except BadRequest as exc:
            return await error_response(exc)(scope, receive, send)
        timeout = self.default_timeout if asked is None else min(asked, self.default_timeout)
        watch = _Watch(receive, send, timeout)
        self.active.add(watch)
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().call_later(TICK, self._tick)
        token = deadline_var.set(watch.deadline)
        try:
            await app(scope, watch.receive, watch.send)
        except asyncio.CancelledError:
            if watch.ending is None:
                raise  # not this request's end: the server's (shutdown)
            await watch.answer(scope, receive, send, timeout)
        finally:
            watch.close()
            self.active.discard(watch)
            deadline_var.reset(token)

    def _tick(self) -> None:
        """Every `TICK` seconds while requests run: end those past their deadline, watch those running a while."""
        now = time.monotonic()
        for watch in list(self.active):
            watch.check(now)
        self._ticker = asyncio.get_running_loop().call_later(TICK, self._tick) if self.active else None


class _Watch:
    """One request: its deadline and, once it has run a while, the task that waits for its client to leave."""

    __slots__ = (
        "upstream", "downstream", "task", "start", "deadline", "watcher", "due", "reading", "started", "ending",
        "cancelled", "closed",
    )  # fmt: skip

    def __init__(self, receive: Receive, send: Send, timeout: float):
        self.upstream = receive
        self.downstream = send
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a request's lifetime is watched from the task that serves it")
        self.task = task
        self.start = time.monotonic()
        self.deadline = self.start + timeout
        self.watcher: asyncio.Task | None = None
        self.due = False
        """It has run `WATCH_AFTER` seconds: watch its connection as soon as its body is in."""
        self.reading = True
        """The body is still arriving: the app's reads see a disconnect themselves."""
        self.started = False
        """The answer has started: nothing can be cancelled any more."""
        self.ending: str | None = None
        self.cancelled = False
        self.closed = False

    async def receive(self) -> Message:
        message = await self.upstream()
        if message["type"] == "http.disconnect":
            if self.started or self.ending is not None:
                return message
            self.ending = GONE
            raise asyncio.CancelledError  # the request ends here; `answer` logs it
        if self.reading and not message.get("more_body", False):
            self.reading = False
            if self.due:
                self._watch_connection()
        return message

    async def send(self, message: Message) -> None:
        self.started = True
        await self.downstream(message)

    def check(self, now: float) -> None:
        if now >= self.deadline:
            self._end(LATE)
        elif not self.due and now - self.start >= WATCH_AFTER:
            self.due = True
            if not self.reading:
                self._watch_connection()

    def _watch_connection(self) -> None:
        self.watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        if (await self.upstream())["type"] == "http.disconnect":
            self._end(GONE)

    def _end(self, why: str) -> None:
        if self.closed or self.started or self.ending is not None:
            return
        self.ending = why
        self.cancelled = True
        self.task.cancel()

    async def answer(self, scope: Scope, receive: Receive, send: Send, timeout: float) -> None:
        """The cancelled request's answer: 504 past its deadline; nothing (499 for the metrics) when its client left."""
        if self.cancelled:
            self.task.uncancel()
        self.close()
        waited = time.monotonic() - self.start
        if self.started:
            return
        if self.ending == LATE:
            what = "%s %s: its deadline of %g s passed; its work was dropped"
            log.info(what, *_route(scope), timeout, extra={"status": 504})
            message = (
                f"no answer within the request's deadline of {timeout:g} s (its x-request-timeout header, or the "
                "server's REQUEST_TIMEOUT); its work was dropped: retry with a longer deadline or a smaller request"
            )
            return await error_response(DeadlineExceeded(message))(scope, receive, send)
        when = "while its body was arriving" if self.reading else "before its answer"
        log.info(
            "%s %s: the client left %s, after %.2f s; its work was dropped",
            *_route(scope),
            when,
            waited,
            extra={"status": 499},
        )
        for event in _CLIENT_CLOSED:
            await send(event)

    def close(self) -> None:
        self.closed = True
        if self.watcher is not None:
            self.watcher.cancel()
            self.watcher = None
