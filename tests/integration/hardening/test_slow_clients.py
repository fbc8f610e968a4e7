"""Slow and heavy clients on a real stack (issue 21): stalled bodies, huge headers and URLs must not starve the rest.

One FastAPI-stack worker (the gateway runs the same `services.api` edge and gunicorn worker class) with a small
in-flight bound and a short read deadline, so that every attack lands on the worker the normal client uses.
Each test prints its measured figures (`pytest -s`).
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import closing, suppress
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from loadtest.stackrun import groups_rss
from tests.support.servers import Server, start_http_stack, worker_pids

MAX_INFLIGHT = 8
READ_TIMEOUT = 3.0
STALLED = 64  # well above the in-flight bound, well below the reading bound (256)
NORMAL_BOUND_S = 1.0
"""What a normal request may take during an attack (the tiny model answers in a few ms)."""
RSS_GROWTH = 0.10
"""How much more memory the stack (gunicorn master and worker) may hold once an attack is over."""


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model) -> Iterator[Server]:
    env = {"SERVING_MAX_INFLIGHT": str(MAX_INFLIGHT), "SERVING_READ_TIMEOUT": str(READ_TIMEOUT)}
    server = start_http_stack(tmp_path_factory.mktemp("slow-clients"), tiny_model, workers=1, env=env)
    yield server
    server.launcher.stop_all()


def connect(server: Server, timeout: float = READ_TIMEOUT + 3) -> socket.socket:
    url = urlsplit(server.url)
    return socket.create_connection((url.hostname, url.port), timeout=timeout)


def stall(server: Server, body_bytes: bytes = b"{") -> socket.socket:
    """Headers and the first bytes of a 1,000-byte body, then nothing."""
    sock = connect(server)
    head = b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    sock.sendall(head + body_bytes)
    return sock


def answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or the socket times out)."""
    data = b""
    with suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def normal_requests(client: httpx.Client, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        response = client.post("/serve/minilm", json={"text": "a normal client"})
        latencies.append(time.perf_counter() - start)
        assert response.status_code == 200, response.text
    return latencies


def figures(latencies: list[float]) -> str:
    return f"p50 {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"


def worker_cpu_seconds(server: Server) -> float:
    (pid,) = worker_pids(server.pid)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def stack_rss(server: Server) -> int:
    return sum(size for _, _, size in groups_rss([server.pid]).values())


def test_stalled_bodies_do_not_lock_out_inference(server):
    with server.client() as client:
        normal_requests(client, 3)  # connected and warm
        rss_before = stack_rss(server)
        start = time.monotonic()
        stalled = [stall(server) for _ in range(STALLED)]
        try:
            time.sleep(0.5)  # the worker has taken every stalled request by now
            latencies = normal_requests(client, 30)
            during = time.monotonic() - start
            ready = client.get("/health/ready").status_code
        finally:
            for sock in stalled:
                sock.close()
    time.sleep(0.5)
    rss_after = stack_rss(server)
    print(
        f"\n{STALLED} stalled bodies, in-flight bound {MAX_INFLIGHT}: normal client {figures(latencies)}; "
        f"RSS {rss_before >> 20} -> {rss_after >> 20} MB"
    )
    assert during < READ_TIMEOUT, "the stalled connections must still be open while the normal client is measured"
    assert max(latencies) < NORMAL_BOUND_S
    assert ready == 200
    assert rss_after <= rss_before * (1 + RSS_GROWTH)


def test_a_stalled_request_gets_408_at_the_read_deadline_and_is_closed(server):
    heads_only = [stall(server, b"") for _ in range(2)]
    partial_heads = []
    for _ in range(2):
        sock = connect(server)
        sock.sendall(b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        partial_heads.append(sock)
    bodies = [stall(server) for _ in range(4)]
    start = time.monotonic()
    answers = []
    for sock in heads_only + partial_heads + bodies:
        with closing(sock):
            answers.append((answer(sock), time.monotonic() - start))
    print(f"\nstalled requests answered after {', '.join(f'{t:.2f}' for _, t in answers)} s (deadline {READ_TIMEOUT})")
    for data, elapsed in answers:
        assert data.startswith(b"HTTP/1.1 408 "), data[:200]
        assert b'"type":"request_timeout"' in data and b"connection: close" in data.lower()
        assert READ_TIMEOUT - 0.5 < elapsed < READ_TIMEOUT + 1.5


HEADER = (b"GET /health/live HTTP/1.1\r\nHost: t\r\nX-Big: ", b"\r\n\r\n")
URL = (b"GET /health/live?q=", b" HTTP/1.1\r\nHost: t\r\n\r\n")


def huge(around: tuple[bytes, bytes], size: int) -> bytes:
    """A request with `size` bytes of one header value (or URL) between `around`'s two parts."""
    return around[0] + b"a" * size + around[1]


def huge_request(server: Server, request: bytes) -> tuple[bytes, float]:
    """The answer to `request`, and how long it took."""
    sock = connect(server, timeout=10)
    start = time.perf_counter()
    with closing(sock):
        with suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        data = answer(sock)
    return data, time.perf_counter() - start


@pytest.mark.parametrize(
    ("what", "around"),
    [
        ("a 1 MB header", (b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nX-Big: ", b"\r\n\r\n")),
        ("a 1 MB URL", URL),
    ],
)
def test_a_huge_header_or_url_is_refused_with_431_at_once(server, what, around):
    data, elapsed = huge_request(server, huge(around, 1 << 20))
    print(f"\n{what}: {data[:12]!r} after {elapsed * 1000:.0f} ms")
    assert data.startswith(b"HTTP/1.1 431 "), data[:200]
    assert b'"type":"header_too_large"' in data and b"connection: close" in data.lower()
    assert elapsed < 1.0


def test_a_20_mb_header_attack_costs_the_worker_little(server):
    request = huge(HEADER, 20 << 20)  # built once: the attacker thread must not hold the GIL the client needs
    rss_before = stack_rss(server)
    cpu = worker_cpu_seconds(server)
    data, elapsed = huge_request(server, request)
    cost = worker_cpu_seconds(server) - cpu
    print(f"\none 20 MB header: {data[:12]!r} after {elapsed:.2f} s, worker CPU {cost:.2f} s")
    assert data.startswith(b"HTTP/1.1 431 ")
    assert cost < 0.2

    stop = threading.Event()
    attacks = []

    def attack():
        while not stop.is_set():
            attacks.append(huge_request(server, request)[0])

    attacker = threading.Thread(target=attack)
    attacker.start()
    try:
        time.sleep(0.2)
        with server.client() as client:
            latencies = normal_requests(client, 30)
    finally:
        stop.set()
        attacker.join(timeout=60)
    rss_after = stack_rss(server)
    print(
        f"during {len(attacks)} 20 MB header attacks: normal client {figures(latencies)}; "
        f"RSS {rss_before >> 20} -> {rss_after >> 20} MB"
    )
    assert attacks and all(data.startswith(b"HTTP/1.1 431 ") for data in attacks)
    assert max(latencies) < NORMAL_BOUND_S
    assert rss_after <= rss_before * (1 + RSS_GROWTH)


def test_requests_pipelined_ahead_of_a_malformed_one_get_their_answers_before_its_400(server):
    """Two inference requests and a line that is not HTTP, in one write on one keep-alive connection: both requests
    are answered in full, in order, then the 400 (JSON) ends the connection."""
    body = b'{"text": "pipelined"}'
    valid = b"POST /serve/minilm HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
    with closing(connect(server)) as sock:
        sock.sendall(valid % (len(body), body) * 2 + b"NOT HTTP AT ALL\r\n\r\n")
        data = answer(sock)
    answers = data.split(b"HTTP/1.1 ")[1:]
    print(f"\nanswers: {[a[:3].decode() for a in answers]}")
    assert [a[:3] for a in answers] == [b"200", b"200", b"400"], data[:600]
    for full in answers[:2]:
        head, payload = full.split(b"\r\n\r\n", 1)
        length = int(next(h for h in head.lower().split(b"\r\n") if h.startswith(b"content-length:")).split(b":")[1])
        assert len(payload) == length and len(orjson.loads(payload)["embedding"]) == server.manifest.output_dim
    error = orjson.loads(answers[2].split(b"\r\n\r\n", 1)[1])["error"]
    assert error["type"] == "bad_request" and "HTTP/1.1" in error["message"]
