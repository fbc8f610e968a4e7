"""The HTTP edge of the error hierarchy: every failure becomes a JSON body `{"error": {...}}` (the OpenAI shape)
with the right status, and Retry-After where retrying helps. An error never costs the client its keep-alive
connection: each is answered with a complete response (`UnexpectedErrors` for the ones nothing expected)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from observability.logging import request_id_var
from services.api.body import validation_field
from services.api.paths import shown_path
from services.common.errors import ServingError

log = logging.getLogger(__name__)
UNHANDLED = {"status": 500}
"""An unexpected error's line counts as a 500 (`observability.repeats`): a request that trips one can be repeated."""


def error_response(error: ServingError) -> JSONResponse:
    """The error as JSON, with the request id the server's log lines carry, so a caller can find them."""
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    body = error.to_dict()
    if (request_id := request_id_var.get()) != "-":
        body["error"]["request_id"] = request_id
    return JSONResponse(body, status_code=error.status_code, headers=headers)


def logged_error_response(method: str, path: str, error: ServingError) -> JSONResponse:
    if error.status_code >= 500:
        status = error.status_code
        log.warning("%s %s -> %d: %s", method, shown_path(path), status, error.message, extra={"status": status})
    return error_response(error)


def internal_error_response(close: bool = False) -> JSONResponse:
    """The 500 of an unexpected error; `close` says `Connection: close` when the server will drop the connection
    after it (so the client does not send its next request on a dead one)."""
    request_id = request_id_var.get()
    message = f"internal error; the server log has it under request id {request_id} (`serving logs --request-id`)"
    body = {"error": {"message": message, "type": "internal_error", "code": 500, "request_id": request_id}}
    return JSONResponse(body, status_code=500, headers={"Connection": "close"} if close else None)


class UnexpectedErrors:
    """Answers an unexpected exception with a complete 500 and does not let it go on, so the connection stays usable.

    FastAPI puts an `Exception` handler in Starlette's outermost ServerErrorMiddleware, which sends the handler's
    response and then re-raises for the server to log; uvicorn then closes the keep-alive connection without a
    `Connection: close`, and the client's next request on it fails.
    Installed as FastAPI middleware, this sits inside that one and catches first. An exception after the response
    has started goes on: the response is cut short, and only closing the connection can say so."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_started(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_started)
        except Exception:
            if started:
                raise
            log.exception("unhandled error on %s %s", scope["method"], shown_path(scope["path"]), extra=UNHANDLED)
            await internal_error_response()(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServingError)
    async def _serving_error(request: Request, exc: ServingError) -> JSONResponse:
        return logged_error_response(request.method, request.url.path, exc)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"no route {request.method} {shown_path(request.url.path)}; see /docs for the API"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {shown_path(request.url.path)}; see /docs for the API"
        else:
            message = str(exc.detail)
        body = {"error": {"message": message, "type": "http_error", "code": exc.status_code}}
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        error = exc.errors()[0]
        field = validation_field(error) or ""
        body = {
            "error": {
                "message": f"field '{field}': {error['msg']}",
                "type": "invalid_input",
                "code": 422,
                "param": field,
            }
        }
        return JSONResponse(body, status_code=422)

    app.add_middleware(UnexpectedErrors)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        """Only for an error raised outside `UnexpectedErrors` (middleware added after it): the server closes the
        connection after this answer, which says so."""
        log.exception("unhandled error on %s %s", request.method, shown_path(request.url.path), extra=UNHANDLED)
        return internal_error_response(close=True)
