"""The door of `POST /serve/{endpoint}[/{version}]`: a raw-ASGI handler in front of FastAPI.

Profiling the gateway showed about half of a worker's time in the framework's layers (routing, dependency
resolution, exception and body-limit middleware) around a handler that itself does little. So once the app has
started, this door answers every `/serve` request itself: it translates ASGI to the data plane's `serve` and the
answer back, with the same error mapping as FastAPI's handlers, and leaves every other request to FastAPI.

Around it (`services.api.lifetime`), every inference request has a deadline and is cancelled, wherever it waits,
when its client disconnects: the door itself only reads the body and answers.

`router` declares the same two routes to FastAPI for the OpenAPI document (/docs, the fuzz tests hold the door to
it). Their handlers answer only when the FastAPI app runs without this door in front; they call the same
`DataPlane.serve`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi import Path as FastAPIPath
from starlette.responses import Response
from starlette.types import Message, Receive

from services.api import paths
from services.api.body import read_body, whole_body
from services.api.dataplane import Answer, DataPlane
from services.api.errors import internal_error_response, logged_error_response
from services.api.openapi import INFERENCE_ERRORS, OK, SERVE_BODY
from services.common.devices import HEADER as DEVICE_HEADER
from services.common.errors import ServingError

log = logging.getLogger(__name__)

_DEVICE_HEADER = DEVICE_HEADER.encode()
CANARY_KEY_HEADER = "x-canary-key"
"""A caller's key: the same key stays on the same version while an endpoint's traffic is split."""
_READ = {name.encode(): name for name in ("content-length", "content-encoding", "content-type", CANARY_KEY_HEADER)}
"""The request headers the door reads (the body's framing and encoding, its type, the canary key)."""


def respond(answer: Answer) -> Response:
    """An answer of the data plane as JSON, with the model name, version and device it came from."""
    headers = {"x-model-name": answer.model, "x-model-version": answer.version}
    if answer.device is not None:
        headers[DEVICE_HEADER] = answer.device
    return Response(answer.body, media_type="application/json", headers=headers)


def _messages(answer: Answer) -> tuple[dict, dict]:
    """`respond(answer)` as the two ASGI messages it sends (the same headers, in the same order), without building
    a Response."""
    headers = [
        (b"x-model-name", answer.model.encode("latin-1")),
        (b"x-model-version", answer.version.encode("latin-1")),
    ]
    if answer.device is not None:
        headers.append((_DEVICE_HEADER, answer.device.encode("latin-1")))
    headers += [(b"content-length", b"%d" % len(answer.body)), (b"content-type", b"application/json")]
    return {"type": "http.response.start", "status": 200, "headers": headers}, {
        "type": "http.response.body",
        "body": answer.body,
    }


async def _chunks(first: Message, receive: Receive) -> AsyncIterator[bytes]:
    """The body's chunks, from its `first` message on, until its last or the client's disconnect."""
    message = first
    while message["type"] != "http.disconnect":
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
        message = await receive()


class ServeFastPath:
    def __init__(self, app):
        self.app = app  # the FastAPI app: everything else goes to it, and its state holds the data plane

    async def __call__(self, scope, receive, send):
        target = paths.serve_target(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if target is None:
            return await self.app(scope, receive, send)  # FastAPI answers the rest, its 404s included
        dataplane: DataPlane | None = getattr(self.app.state, "dataplane", None)
        if dataplane is None:
            return await self.app(scope, receive, send)
        headers = {_READ[k]: v.decode("latin-1") for k, v in scope["headers"] if k in _READ}
        limit = dataplane.settings.max_body_bytes

        async def read() -> bytes:
            first = await receive()
            if first["type"] == "http.request" and not first.get("more_body", False):
                return whole_body(first.get("body", b""), headers, limit)
            return await read_body(_chunks(first, receive), headers, limit)

        endpoint, version = target
        try:
            answer = await dataplane.serve(
                endpoint, version, read, headers.get(CANARY_KEY_HEADER), headers.get("content-type")
            )
            start, body = _messages(answer)
        except ServingError as exc:
            response = logged_error_response("POST", scope["path"], exc)
        except Exception:
            log.exception("unhandled error on POST %s", paths.shown_path(scope["path"]), extra={"status": 500})
            response = internal_error_response()
        else:
            await send(start)
            return await send(body)
        await response(scope, receive, send)


router = APIRouter()
ENDPOINT = FastAPIPath(description="The endpoint's name", examples=["minilm"])
VERSION = FastAPIPath(description="One of the endpoint's live versions", examples=["1"])


async def _serve(request: Request, endpoint: str, version: str | None) -> Response:
    dataplane: DataPlane = request.app.state.dataplane
    limit = dataplane.settings.max_body_bytes
    answer = await dataplane.serve(
        endpoint,
        version,
        lambda: read_body(request.stream(), request.headers, limit),
        request.headers.get(CANARY_KEY_HEADER),
        request.headers.get("content-type"),
    )
    return respond(answer)


@router.post(
    paths.SERVE,
    summary="Run the endpoint's model on a text or a list of texts",
    responses=OK | INFERENCE_ERRORS,
    openapi_extra=SERVE_BODY,
)
async def serve(request: Request, endpoint: str = ENDPOINT) -> Response:
    return await _serve(request, endpoint, None)


@router.post(
    paths.SERVE_VERSION,
    summary="Run a specific version of the endpoint's model",
    responses=OK | INFERENCE_ERRORS,
    openapi_extra=SERVE_BODY,
)
async def serve_version(request: Request, endpoint: str = ENDPOINT, version: str = VERSION) -> Response:
    return await _serve(request, endpoint, version)
