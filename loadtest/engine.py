"""The built-in attack engine: open loop (a constant rate, Vegeta-style) or closed loop (fixed concurrency,
Apache Bench `-c`), over aiohttp, in one or several processes.

A gRPC target (`grpc://HOST:PORT/SERVICE/METHOD`, `loadtest.targets.grpc_target`) is sent as one unary call over a
`grpc.aio` channel each process opens once per address and shares between all its calls (one HTTP/2 connection: a
server whose workers share a port with SO_REUSEPORT gives all of one process's calls to one worker). Its body goes
out as it is (no serializer) and its answer's status is recorded as the HTTP status it stands for (`GRPC_HTTP_CODES`),
so every report reads gRPC results as it reads HTTP ones. gRPC calls carry no trace context: with tracing, they get no
client span.

Open loop: request i is due at start + i/rate whatever the server does; its latency is measured from that due time,
so a server that stalls cannot hide the queue it causes (no coordinated omission). When the generator itself falls
behind its schedule its stats show by how much (`AttackStats.max_lag`), and `loadtest.spec.warnings_for` says so aloud.

A latency is measured from the earlier of the due time and the moment the request began, on one monotonic clock, so it
is never negative: uvloop's timers fire up to ~1.3 ms *before* the time asked (libuv keeps its loop time in whole
milliseconds and rounds the delay), so a request can go out before it is due, and measured from its due time an
answer that came back at once (a 429 from a server shedding load, ~0.3 ms on loopback) had a negative latency.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import aiohttp
import grpc
import uvloop
from opentelemetry.trace import Span, StatusCode

from loadtest.results import Result
from loadtest.spec import AttackSpec as AttackSpec  # re-exported: callers build attacks as engine.AttackSpec(...)
from loadtest.spec import AttackStats as AttackStats  # re-exported with it
from loadtest.targets import Target, grpc_address
from loadtest.tracing import ClientTracing, flush

Callback = Callable[[Result], None]

GRPC_HTTP_CODES = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
"""The HTTP status a gRPC call's status is recorded as; any other is 500."""


def http_code(status: grpc.StatusCode) -> int:
    return GRPC_HTTP_CODES.get(status, 500)


class GrpcChannels:
    """The process's `grpc.aio` channels, one per address, opened on first use; calls time out after `timeout`."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._methods: dict[str, grpc.aio.UnaryUnaryMultiCallable] = {}

    def method(self, url: str) -> grpc.aio.UnaryUnaryMultiCallable:
        """The raw-bytes unary call of a target's URL (its request already serialized, its answer left as bytes)."""
        if url not in self._methods:
            address, path = grpc_address(url)
            if address not in self._channels:
                self._channels[address] = grpc.aio.insecure_channel(address)
            self._methods[url] = self._channels[address].unary_unary(path)
        return self._methods[url]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


async def _call_grpc(channels: GrpcChannels, target: Target) -> tuple[int, int, str, str | None]:
    """(HTTP-like code, bytes received, error, Retry-After) of one gRPC call."""
    metadata = tuple((k.lower(), v) for k, v in target.headers.items()) or None
    try:
        answer = await channels.method(target.url)(target.body, timeout=channels.timeout, metadata=metadata)
        return 200, len(answer), "", None
    except grpc.aio.AioRpcError as exc:
        code = http_code(exc.code())
        retry_after = None
        if code in (429, 503):
            retry_after = next((str(v) for k, v in exc.trailing_metadata() or () if k == "retry-after"), None)
        return code, 0, f"{code} {exc.code().name}: {exc.details()}", retry_after


async def _fire(
    session: aiohttp.ClientSession,
    target: Target,
    seq: int,
    due_wall: float,
    due_mono: float,
    name: str,
    tracing: ClientTracing | None = None,
    channels: GrpcChannels | None = None,
) -> Result:
    origin = min(due_mono, time.monotonic())  # early when the loop's timer fired early: never after the send
    began = due_wall - (due_mono - origin)
    code, size, error, retry_after = 0, 0, "", None
    headers = target.headers
    span = None
    if target.url.startswith("grpc://"):
        if channels is None:
            raise ValueError(f"{target.url}: a gRPC target needs the process's channels")
        code, size, error, retry_after = await _call_grpc(channels, target)
        return _result(target, seq, began, int((time.monotonic() - origin) * 1e9), code, size, error, name, retry_after)
    if tracing is not None:
        extra, span = tracing.start(target.method, target.url, int(began * 1e9))
        headers = {**headers, **extra} if extra else headers
    try:
        async with session.request(target.method, target.url, data=target.body or None, headers=headers) as response:
            body = await response.read()
            code, size = response.status, len(body)
            if code >= 400:
                error = f"{code} {response.reason}"
                if code in (429, 503):
                    retry_after = response.headers.get("Retry-After")
    except TimeoutError:
        error = "timeout"
    except aiohttp.ClientError as exc:
        error = str(exc) or type(exc).__name__
    latency = int((time.monotonic() - origin) * 1e9)
    if span is not None:
        _end_span(span, code, error, int(began * 1e9) + latency)
    return _result(target, seq, began, latency, code, size, error, name, retry_after)


def _result(
    target: Target,
    seq: int,
    began: float,
    latency: int,
    code: int,
    size: int,
    error: str,
    name: str,
    retry_after: str | None,
) -> Result:
    return Result(
        seq=seq,
        timestamp=began,
        latency=latency,
        code=code,
        bytes_in=size,
        bytes_out=len(target.body),
        error=error,
        method=target.method,
        url=target.url,
        attack=name,
        retry_after=retry_after,
    )


def _end_span(span: Span, code: int, error: str, end_ns: int) -> None:
    """The client span's outcome, so `serving analyze` can count the requests that failed or timed out (their server
    spans may never arrive) instead of silently leaving them out."""
    span.set_attribute("http.response.status_code", code)
    if error:
        span.set_attribute("error.type", "timeout" if error == "timeout" else str(code) if code else error)
        span.set_status(StatusCode.ERROR, error)
    span.end(end_time=end_ns)


def _dropped(seq: int, due_wall: float, name: str) -> Result:
    """The result of a request the open loop did not send: `max_inflight` were already outstanding."""
    return Result(
        seq=seq,
        timestamp=due_wall,
        latency=0,
        code=0,
        bytes_in=0,
        bytes_out=0,
        error="generator: too many requests in flight",
        attack=name,
    )


def _session(spec: AttackSpec, connections: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=connections, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=spec.timeout),
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
    )


async def open_loop(
    spec: AttackSpec, on_result: Callback, *, start_wall: float | None = None, offset: int = 0, stride: int = 1
) -> AttackStats:
    """Send request offset, offset+stride, ... of a schedule at `spec.rate` (stride > 1 splits it across processes)."""
    assert spec.rate and spec.rate > 0
    total = spec.total()
    stats = AttackStats()
    cpu_start, wall_start = time.process_time(), time.monotonic()
    start_wall = start_wall or time.time() + 0.05
    start_mono = time.monotonic() + (start_wall - time.time())
    pending: set[asyncio.Task] = set()
    channels = GrpcChannels(spec.timeout)

    def done(task: asyncio.Task) -> None:
        pending.discard(task)
        on_result(task.result())

    async with _session(spec, spec.max_inflight) as session:
        index = offset
        while total is None or index < total:
            due_mono = start_mono + index / spec.rate
            wait = due_mono - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            now = time.monotonic()
            stats.max_lag = max(stats.max_lag, now - due_mono)
            due_wall = start_wall + index / spec.rate
            if len(pending) >= spec.max_inflight:
                stats.dropped += 1
                on_result(_dropped(index, due_wall, spec.name))
            else:
                target = spec.targets[index % len(spec.targets)]
                task = asyncio.create_task(
                    _fire(session, target, index, due_wall, due_mono, spec.name, spec.tracing, channels)
                )
                task.add_done_callback(done)
                pending.add(task)
            stats.sent += 1
            stats.first_send = stats.first_send or now
            stats.last_send = now
            index += stride
        if pending:
            await asyncio.wait(pending)
    await channels.close()
    stats.cpu_seconds = time.process_time() - cpu_start
    stats.wall_seconds = time.monotonic() - wall_start
    return stats


async def closed_loop(spec: AttackSpec, on_result: Callback) -> AttackStats:
    """`spec.concurrency` workers, each sending its next request when the last one answered (like `ab -c`)."""
    stats = AttackStats()
    cpu_start, wall_start = time.process_time(), time.monotonic()
    deadline = wall_start + spec.duration if spec.duration else float("inf")
    counter = iter(range(spec.requests if spec.requests is not None else 1 << 62))
    channels = GrpcChannels(spec.timeout)

    async with _session(spec, spec.concurrency) as session:

        async def worker() -> None:
            for seq in counter:
                now = time.monotonic()
                if now >= deadline:
                    return
                stats.sent += 1
                stats.first_send = stats.first_send or now
                stats.last_send = now
                target = spec.targets[seq % len(spec.targets)]
                on_result(await _fire(session, target, seq, time.time(), now, spec.name, spec.tracing, channels))

        await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
    await channels.close()
    stats.cpu_seconds = time.process_time() - cpu_start
    stats.wall_seconds = time.monotonic() - wall_start
    return stats


def _process_main(spec: AttackSpec, start_wall: float, offset: int, stride: int) -> tuple[list[Result], AttackStats]:
    results: list[Result] = []
    stats = uvloop.run(open_loop(spec, results.append, start_wall=start_wall, offset=offset, stride=stride))
    flush()
    return results, stats


def attack(spec: AttackSpec, on_result: Callback, processes: int = 1) -> AttackStats:
    """Run the attack; with processes > 1 (open loop only) the schedule is split across processes."""
    if spec.rate is None or processes <= 1:
        stats = uvloop.run(closed_loop(spec, on_result) if spec.rate is None else open_loop(spec, on_result))
        flush()
        return stats
    start_wall = time.time() + 1.0  # time for the processes to start
    stats = AttackStats()
    with ProcessPoolExecutor(processes) as pool:
        futures = [pool.submit(_process_main, spec, start_wall, k, processes) for k in range(processes)]
        for future in futures:
            results, part = future.result()
            for result in results:
                on_result(result)
            stats = stats.merge(part)
    return stats


def closed_run(
    targets: list[Target], seconds: float, concurrency: int, name: str = ""
) -> tuple[list[Result], AttackStats]:
    """A closed loop of `concurrency` workers for `seconds`: its results and the generator's stats."""
    results: list[Result] = []
    spec = AttackSpec(targets=targets, rate=None, concurrency=concurrency, duration=seconds, name=name)
    return results, attack(spec, results.append)
