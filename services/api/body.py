"""Reading a request body: size limit, UTF-8, JSON and schema, each failure with its own status and message."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from services.common.errors import BadRequest, InvalidInput, PayloadTooLarge
from services.common.names import printable, shown

Model = TypeVar("Model", bound=BaseModel)
GZIP_MAGIC = b"\x1f\x8b"
MAX_GZIP_MEMBERS = 16
"""gzip members one body may hold (clients send one; `gzip.open(..., "ab")` appends more)."""


async def read_body(chunks: AsyncIterator[bytes], headers: Mapping[str, str], limit: int) -> bytes:
    """The whole body, refusing (413) as soon as it is over `limit` bytes."""
    declared = _declared(headers, limit)
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
    return _complete(bytes(body), declared, headers, limit)


def whole_body(body: bytes, headers: Mapping[str, str], limit: int) -> bytes:
    """`read_body` of a body that came in one piece (nearly every body does)."""
    declared = _declared(headers, limit)
    if len(body) > limit:
        raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
    return _complete(body, declared, headers, limit)


def _declared(headers: Mapping[str, str], limit: int) -> str | None:
    """The body's Content-Length, refused (413) at once when over `limit`."""
    declared = headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes is over the limit of {limit} bytes")
    return declared


def _complete(body: bytes, declared: str | None, headers: Mapping[str, str], limit: int) -> bytes:
    """The body as read, checked against its Content-Length and decoded from its Content-Encoding."""
    if declared and declared.isdigit() and len(body) < int(declared):  # the chunks ended early: the client left
        raise BadRequest(f"the request body ended after {len(body)} of its {declared} bytes (Content-Length)")
    encoding = (headers.get("content-encoding") or "identity").strip().lower()
    if encoding == "gzip":
        return gunzip(body, limit)
    if encoding != "identity":
        raise BadRequest(f"content-encoding {shown(encoding)} is not supported: send the body plain or gzip-encoded")
    return body


def gunzip(data: bytes, limit: int) -> bytes:
    """A gzip body, refused (413) once its decompressed size passes `limit`: a small bomb cannot fill memory. Only a
    complete stream is accepted (400 otherwise): one that stops before its CRC trailer was cut short, and bytes after
    it are not gzip; several members one after the other are one stream (RFC 1952), as `gzip.decompress` reads them,
    up to `MAX_GZIP_MEMBERS` (each member's start is found from what zlib leaves over, a copy of the rest: a body of
    thousands of tiny members cost a time quadratic in its size, 53 s of the event loop for 8 MB)."""
    out = bytearray()
    view = memoryview(data)
    for _ in range(MAX_GZIP_MEMBERS):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += inflater.decompress(view, limit + 1 - len(out))
        except zlib.error as exc:
            raise BadRequest(f"the gzip-encoded body cannot be decompressed: {exc}") from None
        if len(out) > limit or inflater.unconsumed_tail:
            raise PayloadTooLarge(f"the body decompresses to more than the limit of {limit} bytes")
        if not inflater.eof:
            raise BadRequest("the gzip-encoded body is cut short (it ends before its CRC trailer): send all of it")
        rest = len(inflater.unused_data)
        if not rest:
            return bytes(out)
        view = view[len(view) - rest :]
        if view[: len(GZIP_MAGIC)] != GZIP_MAGIC:
            raise BadRequest(f"the gzip-encoded body has {rest} bytes after its end that are not gzip: remove them")
    raise BadRequest(
        f"the gzip-encoded body has more than {MAX_GZIP_MEMBERS} members (gzip streams one after the other): "
        "compress the body as one stream"
    )


async def read_json(request: Request, limit: int) -> Any:
    return parse_json(await read_body(request.stream(), request.headers, limit))


def parse_json(body: bytes) -> Any:
    if not body:
        raise BadRequest('empty request body: send JSON such as {"text": "hello world"}')
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request body is not valid UTF-8 (byte {exc.start}): send UTF-8 encoded JSON") from None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}") from None


def validate(schema: type[Model], data: Any) -> Model:
    if not isinstance(data, dict):
        raise InvalidInput(f"the JSON body must be an object, not {type(data).__name__}")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = validation_field(error)
        message = error["msg"].removeprefix("Value error, ")
        where = f"field '{field}': " if field else ""
        raise InvalidInput(f"{where}{message}", param=field) from None


def validation_field(error: Mapping[str, Any]) -> str | None:
    """The dotted field of a pydantic validation error, as a message may carry it: a client's own keys can be in
    it (an unknown field, a key of a mapping), so it is cut short and escaped."""
    field = ".".join(str(part) for part in error["loc"])
    return printable(field, 80) if field else None
