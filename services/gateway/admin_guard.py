"""The admin API's door: its token, read once at start, and each request's token checked before any byte of its
body is read, then the body read under a cap (`GATEWAY_ADMIN_MAX_BODY_BYTES`).

FastAPI reads and parses a route's body before its dependencies run, so a check in a dependency comes after the
body: the check runs in the routes' class instead (`guarded_route`), between Starlette's routing and FastAPI's
handler, which then gets the body already read. A blank token fails the start: `Authorization: Bearer` with nothing
after it must never match."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive

from services.api.body import read_body
from services.common.errors import ConfigurationError, Unauthorized, Unavailable
from services.gateway.settings import GatewaySettings

log = logging.getLogger(__name__)
NEW_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
"""A command that prints a good token, named in the refusals."""


def admin_token(settings: GatewaySettings) -> str | None:
    """The token the admin routes ask for: `admin_token`, else the content of `admin_token_file`; None (the admin
    API off) when neither is set or the file does not exist. An empty or blank token, one of several lines and a file
    that cannot be read are ConfigurationErrors: the service does not start."""
    if settings.admin_token is not None:
        fix = f"set it to a long random string ({NEW_TOKEN}), or unset it to read GATEWAY_ADMIN_TOKEN_FILE"
        return _one_line(settings.admin_token.get_secret_value(), "GATEWAY_ADMIN_TOKEN", fix)
    if settings.admin_token_file is None:
        return None
    path = Path(settings.admin_token_file)
    if not path.exists():
        log.warning("the admin API is off: its token file %s (GATEWAY_ADMIN_TOKEN_FILE) does not exist", path)
        return None
    where = f"the admin token file {path} (GATEWAY_ADMIN_TOKEN_FILE)"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise ConfigurationError(f"{where} cannot be read ({reason}): make it a text file the server reads") from None
    fix = f"write a token into it ({NEW_TOKEN}), or delete it and `serving up` writes a new one"
    return _one_line(text, where, fix)


def _one_line(value: str, where: str, fix: str) -> str:
    token = value.strip()
    if not token:
        raise ConfigurationError(f"{where} is empty or blank, which would let any caller in: {fix}")
    if "\n" in token or "\r" in token:
        raise ConfigurationError(f"{where} holds several lines; a token is one line: {fix}")
    return token


def authorize(header: str, expected: str | None) -> None:
    """Refuse an `Authorization` header that is not `Bearer <expected>` (compared in constant time); 503 while the
    admin API has no token."""
    if expected is None:
        raise Unavailable("the admin API is off: set GATEWAY_ADMIN_TOKEN or GATEWAY_ADMIN_TOKEN_FILE")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise Unauthorized("send the admin token as 'Authorization: Bearer <token>' (run/admin-token)")


NO_STATE = "no deployment state is configured (SERVING_STATE_URL)"
"""Why an admin route refuses every request of a gateway without a deployment state."""


def guarded_route(expected: str | None, has_store: bool, max_body_bytes: int) -> type[APIRoute]:
    """The class of the admin routes: the token, then whether a deployment state is configured, then the body, at
    most `max_body_bytes` (413 as soon as it is over), each refused before the next is looked at."""

    class AdminRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                authorize(request.headers.get("authorization", ""), expected)
                if not has_store:
                    raise Unavailable(NO_STATE)
                body = await read_body(request.stream(), request.headers, max_body_bytes)
                return await handler(Request(request.scope, _replay(body, request.receive)))

            return guarded

    return AdminRoute


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body already read, then whatever the connection says next (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
