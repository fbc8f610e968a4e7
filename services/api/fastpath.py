"""A raw-ASGI fast path for the hot route, `POST /serve/{endpoint}[/{version}]`.

Profiling the gateway showed about half of a worker's time in the framework's layers (routing, dependency
resolution, exception and body-limit middleware) around a handler that itself does little. This path calls the same
`serve_core` the FastAPI route calls, with the same error mapping, and leaves every other request to FastAPI (which
still documents the route in /docs).
"""

from __future__ import annotations

import logging

from starlette.responses import Response

from services.api.body import read_body
from services.api.errors import internal_error_response, logged_error_response
from services.api.routes import CANARY_KEY_HEADER, serve_core
from services.common.errors import ServingError

log = logging.getLogger(__name__)


class ServeFastPath:
    def __init__(self, app):
        self.app = app  # the FastAPI app: everything else goes to it, and its state holds the data plane

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/serve/"):
            return await self.app(scope, receive, send)
        parts = scope["path"][len("/serve/") :].rstrip("/").split("/")  # `/serve/name/` is `/serve/name`
        if not 1 <= len(parts) <= 2 or not all(parts):
            return await self.app(scope, receive, send)  # FastAPI answers its 404
        dataplane = getattr(self.app.state, "dataplane", None)
        if dataplane is None:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}

        async def chunks():
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        async def read() -> bytes:
            return await read_body(chunks(), headers, dataplane.settings.max_body_bytes)

        try:
            response: Response = await serve_core(
                dataplane,
                parts[0],
                parts[1] if len(parts) == 2 else None,
                read,
                headers.get(CANARY_KEY_HEADER),
                headers.get("content-type"),
            )
        except ServingError as exc:
            response = logged_error_response("POST", scope["path"], exc)
        except Exception:
            log.exception("unhandled error on POST %s", scope["path"])
            response = internal_error_response()
        await response(scope, receive, send)
