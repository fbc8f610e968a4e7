"""Admission: bound the inference requests one worker holds at once, and turn the rest away as cheaply as possible.

Past the bound a request gets 429 with Retry-After before anything else is spent on it: its body is not read, no
route is resolved, and the answer is encoded once per worker, only the request id spliced in. Under overload most
requests are refused, so what a refusal costs is capacity taken from the admitted ones (measured by `loadtest
overload`).
"""

from __future__ import annotations

import orjson

from observability import metrics
from observability.logging import request_id_var
from services.api.paths import is_inference


class AdmissionMiddleware:
    def __init__(self, app, limit: int, retry_after: int = 1):
        self.app = app
        self.limit = limit
        self.inflight = 0
        self.retry_after = retry_after
        message = (
            f"this worker is handling {limit} requests, its limit (SERVING_/GATEWAY_MAX_INFLIGHT); retry after "
            f"{retry_after} s, or add workers"
        )
        # The refusal's JSON up to its last field, the request id: the body is head + the id + b"}}".
        error = {"message": message, "type": "overloaded", "code": 429, "request_id": None}
        self._head = orjson.dumps({"error": error})[: -len(b"null}}")]
        self._retry_after = str(retry_after).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not is_inference(scope["method"], scope["path"]):
            return await self.app(scope, receive, send)
        if self.inflight >= self.limit:
            return await self._refuse(send)
        self.inflight += 1
        metrics.INFLIGHT.inc()
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1
            metrics.INFLIGHT.dec()

    async def _refuse(self, send) -> None:
        body = self._head + orjson.dumps(request_id_var.get()) + b"}}"
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", self._retry_after),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})
