"""Admission: bound the inference requests one worker holds at once, and turn the rest away as cheaply as possible.

Past the bound a request gets 429 with Retry-After before anything else is spent on it: its body is not read, no
route is resolved, the answer is a pre-encoded body. Under overload most requests are refused, so what a refusal
costs is capacity taken from the admitted ones (measured by `loadtest overload`).
"""

from __future__ import annotations

import orjson

from observability import metrics
from observability.logging import request_id_var


def is_inference(method: str, path: str) -> bool:
    """The routes that run a model (the only ones bounded: health, metrics and admin always answer)."""
    return method == "POST" and (
        path.startswith(("/serve/", "/v1/")) or (path.startswith("/v2/models/") and path.endswith("/infer"))
    )


class AdmissionMiddleware:
    def __init__(self, app, limit: int, retry_after: int = 1):
        self.app = app
        self.limit = limit
        self.inflight = 0
        self.retry_after = retry_after
        self.message = (
            f"this worker is handling {limit} requests, its limit (SERVING_/GATEWAY_MAX_INFLIGHT); retry after "
            f"{retry_after} s, or add workers"
        )

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
        error = {"message": self.message, "type": "overloaded", "code": 429, "request_id": request_id_var.get()}
        body = orjson.dumps({"error": error})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(self.retry_after).encode()),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})
