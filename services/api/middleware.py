"""Pure-ASGI middleware: request id, trace context, access metrics. Cheap enough to sit on every request."""

from __future__ import annotations

import itertools
import os
import re
import time

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from observability import metrics
from observability.logging import request_id_var, trace_id_var
from observability.tracing import extract_context, get_tracer, tracing_enabled
from services.api.paths import UNMETERED, route_label

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
    def __init__(self, app, service_name: str):
        self.app = app
        self.tracer = get_tracer(service_name)
        self.request_ids = _request_ids()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path: str = scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        request_id = headers.get("x-request-id")
        if request_id is None or not REQUEST_ID.fullmatch(request_id):
            request_id = next(self.request_ids)
        token = request_id_var.set(request_id)
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
                        trace_id_var.reset(trace_token)
            else:
                await self.app(scope, receive, send_wrapper)
        finally:
            request_id_var.reset(token)
            if not path.startswith(UNMETERED):
                route = route_label(path)
                metrics.child(metrics.REQUESTS, route, str(status["code"])).inc()
                metrics.child(metrics.REQUEST_LATENCY, route).observe(time.perf_counter() - start)
