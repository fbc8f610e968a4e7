"""Pure-ASGI middleware: request id, trace context, access metrics, and one completion line per inference request.
Cheap enough to sit on every request.

The completion line is the one log line a served request writes (the access log is off for speed): written here, the
one place that knows every request's outcome (a 200, a 4xx answered by any layer inside, a 429 from admission, a 504
or 499 from the request's lifetime), it carries the method, path, status, latency, and the request id and trace id
(and, once a version was chosen, the endpoint, version and run), so `serving logs --request-id ID` finds every
inference request by the id its caller got in `x-request-id` or in an error body."""

from __future__ import annotations

import itertools
import logging
import os
import random
import re
import time

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from observability import metrics
from observability.logging import request_id_var, trace_id_var
from observability.tracing import extract_context, get_tracer, tracing_enabled
from services.api.paths import UNMETERED, is_inference, route_label, serve_target

completion_log = logging.getLogger("serving.completion")

REQUEST_ID = re.compile(r"[A-Za-z0-9._:+/=-]{1,128}")
"""An incoming `x-request-id` is kept (so a caller's id follows its request through the logs) only if it is this
short and made of these characters (UUIDs, ULIDs, base64, trace ids); any other is replaced by one of ours, so a
caller can neither inject log lines nor have 100 KB echoed back on every request."""


def _request_ids():
    """Unique per process and cheap (uuid4 reads the kernel's random source on every call)."""
    prefix = os.urandom(6).hex()
    for number in itertools.count(1):
        yield f"{prefix}-{number:x}"


class ObservabilityMiddleware:
    def __init__(self, app, service_name: str, completion_sample: float = 1.0):
        self.app = app
        self.tracer = get_tracer(service_name)
        self.request_ids = _request_ids()
        self.completion_sample = completion_sample
        """Share of successful inference requests that write a completion line; every error (>= 400) writes one."""

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path: str = scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        request_id = headers.get("x-request-id")
        if request_id is None or not REQUEST_ID.fullmatch(request_id):
            request_id = next(self.request_ids)
        token = request_id_var.set(request_id)
        trace_token = None
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [(b"x-request-id", request_id.encode())]
            await send(message)

        start = time.perf_counter()
        try:
            if tracing_enabled() and not path.startswith(UNMETERED):
                name = f"{scope['method']} {route_label(path)}"
                with self.tracer.start_as_current_span(
                    name,
                    context=extract_context(headers),
                    kind=SpanKind.SERVER,
                    attributes={"http.request.method": scope["method"], "url.path": path},
                ) as span:
                    trace_token = trace_id_var.set(format(span.get_span_context().trace_id, "032x"))
                    try:
                        await self.app(scope, receive, send_wrapper)
                    finally:
                        span.set_attribute("http.response.status_code", status["code"])
                        if status["code"] >= 500:
                            span.set_status(trace.Status(trace.StatusCode.ERROR))
            else:
                await self.app(scope, receive, send_wrapper)
        finally:
            if not path.startswith(UNMETERED):
                route = route_label(path)
                elapsed = time.perf_counter() - start
                metrics.child(metrics.REQUESTS, route, str(status["code"])).inc()
                metrics.child(metrics.REQUEST_LATENCY, route).observe(elapsed)
                code = status["code"]
                if is_inference(scope["method"], path) and (code >= 400 or random.random() < self.completion_sample):
                    _log_completion(scope["method"], path, code, elapsed)
            if trace_token is not None:
                trace_id_var.reset(trace_token)
            request_id_var.reset(token)


def _log_completion(method: str, path: str, status: int, elapsed: float) -> None:
    """The request's completion line, under its request id and trace id (the log filter adds them, and the endpoint
    and version once one was chosen; a request refused before that names the endpoint its path asked for)."""
    fields = {"method": method, "path": path, "status": status, "latency_ms": round(elapsed * 1000, 3)}
    if (target := serve_target(path)) is not None:
        fields["endpoint"], fields["version"] = target[0], target[1] or "-"
    completion_log.info("%s %s -> %d in %.1f ms", method, path, status, elapsed * 1000, extra=fields)
