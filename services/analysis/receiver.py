"""The stack's own OTLP/HTTP trace receiver: `POST /v1/traces` (protobuf, as the SDKs and Triton send, or OTLP/JSON)
into the span store (`run/traces/spans.db`), so `make up TRACES=1` collects every span with no external service.

Bounded: a request body over `--max-body` MB is refused with 413, the store keeps at most `--max-spans` spans (the
oldest go first), and the process holds no spans in memory between requests.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.analysis.spans import from_otlp_json, from_protobuf
from services.analysis.store import SpanStore
from services.api.body import read_body
from services.common.errors import ServingError

log = logging.getLogger(__name__)


def create_app(store: SpanStore, max_body: int) -> Starlette:
    async def traces(request: Request) -> Response:
        try:  # the API's own reader: size limit before and after a (bounded) gunzip
            body = await read_body(request.stream(), request.headers, max_body)
        except ServingError as error:
            return JSONResponse({"error": error.message}, error.status_code)
        json_body = request.headers.get("content-type", "").startswith("application/json")
        try:
            spans = from_otlp_json(json.loads(body)) if json_body else from_protobuf(body)
        except Exception as exc:  # noqa: BLE001 - any undecodable export is the sender's error
            return JSONResponse({"error": f"not an OTLP trace export: {exc}"}, 400)
        await run_in_threadpool(store.add, spans)
        return JSONResponse({}) if json_body else Response(b"", media_type="application/x-protobuf")

    async def health(request: Request) -> Response:
        return JSONResponse({"spans": store.count})

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"]), Route("/health", health)])


def main(
    store: Path = typer.Option(Path("run/traces/spans.db"), help="SQLite span store."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback: only local services send spans)."),
    port: int = typer.Option(4318, help="OTLP/HTTP port."),
    max_spans: int = typer.Option(2_000_000, min=1000, help="Spans kept; the oldest go first."),
    max_body: int = typer.Option(32, min=1, help="Largest export accepted, MB."),
) -> None:
    """Receive OTLP/HTTP traces into a SQLite span store."""
    app = create_app(SpanStore(store, max_spans), max_body * 2**20)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    typer.run(main)
