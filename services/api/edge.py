"""The edge: the one pure-ASGI layer every request crosses before the app (the /serve door, then FastAPI).

In order, for an HTTP request:

1. its request id: the caller's `x-request-id` if short and safe (`REQUEST_ID`), else one of ours; on every log line
   of the request and in its answer's `x-request-id` header; in a sampled trace, the request's server span;
2. the API key, where keys are configured and the path is guarded (`services.api.auth`): 401 without one;
3. for an inference request, admission (`services.api.admission`: 429 or 503 past the worker's bounds), then its
   lifetime (`services.api.lifetime`: a deadline, and the end of its work when its client leaves);
4. once answered: the access metrics (`serving_requests_total`, `serving_request_duration_seconds`, by route and
   status, probes and scrapes left out) and the completion line.

The completion line is the one log line a served request writes (the access log is off for speed): written here, the
one place that knows every request's outcome (a 200, a 4xx answered by any step or by the app, a 429 from admission, a
504 or 499 from the request's lifetime), it carries the method, path, status, latency, and the request id and trace
id (and, once a version was chosen, the endpoint, version and run), so `serving logs --request-id ID` finds every
inference request by the id its caller got in `x-request-id` or in an error body. Errors always write theirs, other
requests a sampled share.

The request's metrics go to the process's tally (`observability.tally`), flushed here when the worker falls idle.
Why one layer, not one middleware per concern: docs/decisions/request-path.md.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import re
import time
from functools import partial

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from starlette.types import ASGIApp, Receive, Scope, Send

from observability import metrics
from observability.logging import request_id_var, trace_id_var
from observability.tally import TALLY
from observability.tracing import extract_context, get_tracer, tracing_enabled
from services.api.admission import Gate
from services.api.auth import ApiKeys
from services.api.lifetime import Lifetimes
from services.api.paths import UNMETERED, is_inference, route_label, serve_target, shown_path
from services.common.names import NAME_MAX_LENGTH, printable

completion_log = logging.getLogger("serving.completion")

REQUEST_ID = re.compile(rb"[A-Za-z0-9._:+/=-]{1,128}")
"""An incoming `x-request-id` is kept (so a caller's id follows its request through the logs) only if it is this
short and made of these characters (UUIDs, ULIDs, base64, trace ids); any other is replaced by one of ours, so a
caller can neither inject log lines nor have 100 KB echoed back on every request."""
REQUEST_ID_HEADER = b"x-request-id"


def _request_ids():
    """Unique per process and cheap (uuid4 reads the kernel's random source on every call)."""
    prefix = os.urandom(6).hex()
    for number in itertools.count(1):
        yield f"{prefix}-{number:x}"


class Edge:
    def __init__(
        self,
        app: ASGIApp,
        service_name: str,
        gate: Gate,
        lifetimes: Lifetimes,
        keys: ApiKeys | None = None,
        completion_sample: float = 1.0,
    ):
        self.app = app
        self.tracer = get_tracer(service_name)
        self.gate = gate
        self.lifetimes = lifetimes
        self.keys = keys
        self.completion_sample = completion_sample
        """Share of successful inference requests that write a completion line; every error (>= 400) writes one."""
        self.request_ids = _request_ids()
        self.active = 0
        """HTTP requests under way: at 0 the worker is idle, and the tally is flushed."""
        self._watched = partial(lifetimes.run, app)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = None
        for name, value in scope["headers"]:
            if name == REQUEST_ID_HEADER:
                given = value  # the last one, as a dict of the headers would keep
        request_id = given.decode() if given is not None and REQUEST_ID.fullmatch(given) else next(self.request_ids)
        token = request_id_var.set(request_id)
        trace_token = None
        extra = [(REQUEST_ID_HEADER, request_id.encode())]
        code = 500

        async def answer(message):
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        path: str = scope["path"]
        metered = not path.startswith(UNMETERED)
        self.active += 1
        start = time.perf_counter()
        try:
            if metered and tracing_enabled():
                with self._span(scope) as span:
                    trace_token = trace_id_var.set(format(span.get_span_context().trace_id, "032x"))
                    try:
                        await self._pass(scope, receive, answer)
                    finally:
                        span.set_attribute("http.response.status_code", code)
                        if code >= 500:
                            span.set_status(trace.Status(trace.StatusCode.ERROR))
            else:
                await self._pass(scope, receive, answer)
        finally:
            if metered:
                self._record(scope["method"], path, code, time.perf_counter() - start)
            if trace_token is not None:
                trace_id_var.reset(trace_token)
            request_id_var.reset(token)
            self.active -= 1
            if not self.active:
                TALLY.flush()

    def _span(self, scope):
        path = scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        return self.tracer.start_as_current_span(
            f"{scope['method']} {route_label(path)}",
            context=extract_context(headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": scope["method"], "url.path": shown_path(path)},
        )

    async def _pass(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The API key, then, for an inference request, admission and its lifetime; then the app."""
        keys = self.keys
        if keys is not None and scope["path"].startswith(keys.prefixes) and not keys.allowed(scope["headers"]):
            return await keys.refuse(scope, receive, send)
        if is_inference(scope["method"], scope["path"]):
            return await self.gate.admit(self._watched, scope, receive, send)
        return await self.app(scope, receive, send)

    def _record(self, method: str, path: str, code: int, elapsed: float) -> None:
        route = route_label(path)
        TALLY.inc(metrics.child(metrics.REQUESTS, route, str(code)))
        TALLY.observe(metrics.child(metrics.REQUEST_LATENCY, route), elapsed)
        if is_inference(method, path) and (code >= 400 or random.random() < self.completion_sample):
            _log_completion(method, path, route, code, elapsed)


def _log_completion(method: str, path: str, route: str, status: int, elapsed: float) -> None:
    """The request's completion line, under its request id and trace id (the log filter adds them, and the endpoint
    and version once one was chosen; a request refused before that names the endpoint its path asked for). What
    the path holds is the client's: it is cut short (`shown_path`, `printable`), and the `route` and `status` let
    the worker's repeat limit (`observability.repeats`) count an error repeated at will instead of writing it."""
    shown = shown_path(path)
    fields = {"method": method, "path": shown, "route": route, "status": status, "latency_ms": round(elapsed * 1000, 3)}
    if (target := serve_target(path)) is not None:
        fields["endpoint"], fields["version"] = printable(target[0], NAME_MAX_LENGTH), printable(target[1] or "-")
    completion_log.info("%s %s -> %d in %.1f ms", method, shown, status, elapsed * 1000, extra=fields)
