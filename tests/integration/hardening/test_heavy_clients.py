"""Heavy clients cannot starve the rest (issue 21), on both HTTP stacks with the tiny model.

The attack, short: 16 connections send requests of 64 texts of 10k characters each, back to back, for 5 s, and give
up on an answer after up to 1 s (the issue's clients gave up after 30 s, and the gateway went on working for them: every
normal request timed out for 73 s after they left; a FastAPI worker kept 1.7 GB). Meanwhile a normal client on a
connection of its own sends one short text at a time. The bounds:

- during the burst, every normal request answers 200 within `NORMAL_BOUND_S`;
- from `SETTLED_S` after the heavy clients left, every normal request answers within `AFTER_BOUND_S`: the abandoned
  requests' work was dropped, not queued;
- the resident memory of the stack's processes (all of them, summed) is back within 10% of its value before, 2.5 s
  after the burst;
- the clients that gave up are logged at INFO, one line each, and no traceback is.

Also: a request's deadline header is answered 504 in time, and clients leaving mid-body are INFO lines. Each test
prints its measured figures (`pytest -s`).
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from statistics import median
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from loadtest.stackrun import groups_rss
from services.modelbuild.tiny import WORDS
from services.triton.repository import RenderOptions
from tests.support.servers import Server, start_gateway, start_http_stack, start_triton

pytestmark = pytest.mark.serial  # it measures rates and latencies: `make test` runs it alone

HEAVY_CLIENTS = 16
BURST_S = 5.0
HEAVY_GIVES_UP_S = 1.0
NORMAL_BOUND_S = 2.0
"""What one normal request may take during the burst (2 shared cores run the attackers, the stack and this test:
measured at most 0.02-0.08 s, 0.4 s with other tests loading the machine; before the change 7.5 s on the gateway, and
the issue's 30 s)."""
SETTLED_S = 1.5
AFTER_BOUND_S = 0.5
"""What one normal request may take from `SETTLED_S` after the heavy clients left (measured ~10-50 ms)."""
RSS_GROWTH = 0.10
EVERY_LINE = {"SERVING_ERROR_LOG_BURST": "1000000"}
"""The tests here count the lines of the requests they make: no repeat limit (`observability.repeats`; test_logs.py
holds it)."""
JSON = {"content-type": "application/json"}


@dataclass
class Stack:
    server: Server
    pgids: list[int]

    def rss(self) -> int:
        return sum(size for _, _, size in groups_rss(self.pgids).values())

    def log(self) -> str:
        return self.server.launcher.log_path("api").read_text(errors="replace")


@pytest.fixture(scope="module")
def clearml(tmp_path_factory, tiny_model) -> Iterator[Stack]:
    triton = start_triton(tmp_path_factory.mktemp("heavy-triton"), tiny_model, RenderOptions(), models=("encoder",))
    try:
        gateway = start_gateway(tmp_path_factory.mktemp("heavy-gateway"), tiny_model, triton, env=EVERY_LINE)
        try:
            procs = triton.launcher.procs + gateway.launcher.procs
            yield Stack(gateway, [proc.pid for _, proc in procs])
        finally:
            gateway.launcher.stop_all()
    finally:
        triton.stop()


@pytest.fixture(scope="module")
def fastapi(tmp_path_factory, tiny_model) -> Iterator[Stack]:
    server = start_http_stack(tmp_path_factory.mktemp("heavy-fastapi"), tiny_model, workers=2, env=EVERY_LINE)
    try:
        yield Stack(server, [proc.pid for _, proc in server.launcher.procs])
    finally:
        server.launcher.stop_all()


def heavy_body(seed: int = 0) -> bytes:
    rnd = random.Random(seed)
    texts = [" ".join(rnd.choice(WORDS) for _ in range(2500))[:10_000] for _ in range(64)]
    return orjson.dumps({"texts": texts})


@dataclass
class Burst:
    heavy: Counter = field(default_factory=Counter)
    normal: list[tuple[float, float, int | str]] = field(default_factory=list)
    """(seconds since the heavy clients left, negative during the burst; latency; status)"""

    def during(self) -> list[float]:
        return [latency for since, latency, _ in self.normal if since < 0]

    def settled(self) -> list[float]:
        return [latency for since, latency, _ in self.normal if since >= SETTLED_S]


async def heavy_clients(url: str, body: bytes, stop: float, tally: Counter) -> None:
    """Each sends its body whole, then waits for the answer between 0 and `HEAVY_GIVES_UP_S` (its own patience,
    drawn per request) and closes the connection if none came: many leave while the server works for them."""
    patience = random.Random(7)

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=10) as session:
            while time.monotonic() < stop:
                waits = httpx.Timeout(10, read=patience.uniform(0, HEAVY_GIVES_UP_S))
                try:
                    response = await session.post("/serve/minilm", content=body, headers=JSON, timeout=waits)
                    tally[response.status_code] += 1
                    if response.status_code in (429, 503):
                        await asyncio.sleep(float(response.headers.get("retry-after", 1)) / 4)
                except httpx.ReadTimeout:
                    tally["gave up"] += 1

    await asyncio.gather(*(client() for _ in range(HEAVY_CLIENTS)))


def normal_client(url: str, stop: float, until: float, seen: list) -> None:
    """On a thread of its own (its latency is the server's, not this process's event loop's, busy sending the
    heavy bodies): one short text at a time."""
    with httpx.Client(base_url=url, timeout=10) as session:
        while time.monotonic() < until:
            start = time.monotonic()
            try:
                status = session.post("/serve/minilm", json={"text": "the quick brown fox"}).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            seen.append((start - stop, time.monotonic() - start, status))
            time.sleep(0.05)


def burst(url: str, body: bytes, seconds: float = BURST_S, after: float = SETTLED_S + 1.0) -> Burst:
    result = Burst()
    stop = time.monotonic() + seconds
    normal = threading.Thread(target=normal_client, args=(url, stop, stop + after, result.normal))
    normal.start()
    asyncio.run(heavy_clients(url, body, stop, result.heavy))
    normal.join()
    return result


def warm(url: str, body: bytes) -> None:
    """The stack's first heavy requests (its threads and buffers made once) before the baseline is taken."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(2):
            assert client.post("/serve/minilm", content=body, headers=JSON).is_success
            assert client.post("/serve/minilm", json={"text": "warm"}).is_success


@pytest.mark.parametrize("name", ["clearml", "fastapi"])
def test_normal_requests_keep_answering_through_a_heavy_burst_and_memory_returns(name, request):
    stack: Stack = request.getfixturevalue(name)
    url, body = stack.server.url, heavy_body()
    warm(url, body)
    time.sleep(1.0)
    before = stack.rss()
    result = burst(url, body)  # returns 2.5 s after the heavy clients left
    after = stack.rss()
    during, settled = result.during(), result.settled()
    codes = Counter(status for _, _, status in result.normal)
    print(
        f"\n{name}: heavy requests {dict(result.heavy)}; normal requests {dict(codes)}, during the burst "
        f"{len(during)} at most {max(during, default=0):.2f} s (median {median(during):.3f} s), from "
        f"{SETTLED_S} s after it {len(settled)} at most {max(settled, default=0):.3f} s; RSS "
        f"{before / 2**20:.0f} MB before, {after / 2**20:.0f} MB after ({after / before - 1:+.1%})"
    )
    assert set(codes) == {200}, codes
    assert max(during) <= NORMAL_BOUND_S
    assert settled and max(settled) <= AFTER_BOUND_S, "the abandoned requests' work went on after their clients left"
    assert after <= before * (1 + RSS_GROWTH)
    log = stack.log()
    gave_up = log.count("the client left before its answer")
    print(f"{name}: {result.heavy['gave up']} heavy requests given up, {gave_up} logged as such")
    assert "Traceback" not in log and not re.search(r"\bERROR\b", log)
    assert gave_up >= min(1, result.heavy["gave up"])
    assert result.heavy[200] > 0, "heavy requests are served too, not only refused"


def test_a_deadline_header_is_answered_504_in_time_and_a_generous_one_200(clearml):
    url, body = clearml.server.url, heavy_body(1)
    with httpx.Client(base_url=url, timeout=30) as client:
        start = time.monotonic()
        late = client.post(
            "/serve/minilm", content=body, headers={"content-type": "application/json", "x-request-timeout": "0.01"}
        )
        took = time.monotonic() - start
        generous = client.post("/serve/minilm", json={"text": "in time"}, headers={"x-request-timeout": "5"})
    print(f"\n64 long texts with a 10 ms deadline: {late.status_code} after {took:.3f} s")
    assert late.status_code == 504 and late.json()["error"]["type"] == "deadline_exceeded"
    assert took < 1.0
    assert generous.status_code == 200


@pytest.mark.parametrize("path", ["/serve/minilm", "/v1/embeddings", "/v2/models/minilm/infer"])
def test_clients_leaving_mid_body_are_info_lines_not_tracebacks(fastapi, path):
    url = urlsplit(fastapi.server.url)
    before = fastapi.log().count("while its body was arriving")
    for _ in range(8):
        with socket.create_connection((url.hostname, url.port)) as sock:
            head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            sock.sendall(head.encode() + b'{"text": "half a bo')
            time.sleep(0.05)
    time.sleep(0.5)
    log = fastapi.log()
    lines = log.count("while its body was arriving") - before
    print(f"\n{path}: 8 clients left mid-body, {lines} INFO lines")
    assert lines == 8
    assert "Traceback" not in log and not re.search(r"\bERROR\b", log)
