"""The gateway app's own CPU per request, in process: no sockets, no Triton, no load generator on the same cores.

The gateway's ASGI app (`services.api.app.create_app` with the gateway's settings, coalescing on, multiprocess
metrics as in a gunicorn worker) serves `POST /serve/{endpoint}` with a backend that answers at once; `--callers`
closed-loop callers drive it on uvloop, and the CPU time of the process (`time.process_time`) over the requests is
what one request costs the worker's event loop: the edge, the data plane, tokenizing and the metrics, all but the
HTTP parser and the model. Seconds of CPU, not of the clock, so other work on the machine moves it less than a
throughput would; still, compare two trees in interleaved rounds on the same machine:

    for round in 1 2 3; do for tree in BASE HEAD; do
        (cd $tree && PYTHONPATH=$tree .venv/bin/python HEAD/loadtest/asgi_cpu.py --model-dir build/model)
    done; done
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

App = Callable[..., Coroutine[Any, Any, None]]
"""An ASGI application, called as uvicorn calls it: `await app(scope, receive, send)`."""

BODY = b'{"text": "the quick brown fox jumps over the lazy dog near the river bank today"}'
HEADERS = [
    (b"host", b"127.0.0.1:8080"),
    (b"user-agent", b"hey/0.0.1"),
    (b"content-type", b"application/json"),
    (b"content-length", b"%d" % len(BODY)),
    (b"accept-encoding", b"gzip"),
]


class InstantBackend:
    """A backend whose answer costs nothing: a unit vector per text."""

    stage = "triton"
    device = "cpu"

    def __init__(self, width: int):
        self.width = width

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def ready(self) -> bool:
        return True

    async def infer(self, batch):
        import numpy as np

        outputs = np.zeros((batch.shape[0], self.width), dtype=np.float32)
        outputs[:, 0] = 1.0
        return outputs


async def _started(app: App) -> tuple[asyncio.Task, asyncio.Queue[dict], dict]:
    inbox: asyncio.Queue[dict] = asyncio.Queue()
    outbox: asyncio.Queue[dict] = asyncio.Queue()
    state: dict = {}
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": state}
    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    message = await outbox.get()
    if message["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the app did not start: {message}")
    return task, inbox, state


async def _request(app: App, state: dict, path: str) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": HEADERS,
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080), "state": dict(state),
    }  # fmt: skip
    messages = [{"type": "http.request", "body": BODY, "more_body": False}]
    status = []

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays until answered

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


async def measure(model_dir: Path, requests: int, callers: int) -> tuple[float, float]:
    """(CPU microseconds a request, requests a second of the clock) over `requests` after a warm-up."""
    from services.api.app import StackParts, create_app
    from services.common.contract import Manifest
    from services.gateway.settings import GatewaySettings

    settings = GatewaySettings(model_dir=model_dir)

    def parts(manifest: Manifest | None, monitor: object) -> StackParts:
        if manifest is None:  # create_app requires the built-in model: it refuses to start without one
            raise SystemExit(f"no built model in {model_dir}")
        return StackParts(InstantBackend(manifest.output_dim))

    app = create_app(settings, parts, service_name="gateway")
    handler = logging.getLogger().handlers[0]
    if isinstance(handler, logging.StreamHandler):  # setup_logging's, to stderr
        handler.setStream(open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
    task, lifespan, state = await _started(app)
    path = f"/serve/{settings.endpoint or Manifest.load(model_dir).endpoint_name}"

    async def caller(count: int) -> None:
        for _ in range(count):
            if (status := await _request(app, state, path)) != 200:
                raise SystemExit(f"POST {path} answered {status}")

    await asyncio.gather(*(caller(max(1, 1000 // callers)) for _ in range(callers)))
    per_caller = max(1, requests // callers)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller(per_caller) for _ in range(callers)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await lifespan.put({"type": "lifespan.shutdown"})
    await task
    done = per_caller * callers
    return cpu / done * 1e6, done / wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=Path("build/model"), help="a built model (its tokenizer)")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--callers", type=int, default=32, help="concurrent closed-loop callers")
    args = parser.parse_args(argv)
    import uvloop

    with tempfile.TemporaryDirectory(prefix="asgi-cpu-metrics-") as metrics_dir:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # as in a gunicorn worker; read when metrics load
        cpu, rate = uvloop.run(measure(args.model_dir.resolve(), args.requests, args.callers))
    print(f"{cpu:.1f} us CPU/request  {rate:.0f} req/s  ({sys.prefix}, services from {_tree()})")


def _tree() -> str:
    import services

    return str(Path(services.__file__).resolve().parent.parent)


if __name__ == "__main__":
    main()
