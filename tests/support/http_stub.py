"""A stand-in HTTP server on a free loopback port, for CLI tests that need something to answer over a real socket."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def send_json(handler: BaseHTTPRequestHandler, status: int, body, headers: dict[str, str] | None = None) -> None:
    """Answer the handler's request with `body` as JSON (and `headers`)."""
    answer = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(answer)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(answer)


def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """The server's base URL while it runs (a fixture's body: it stops when the fixture ends)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
