"""Logs cannot be used against the host (issue 37), on a real gateway (gunicorn, one worker, JSON logs, no Triton: its
endpoint `ok` is a `custom` one) whose log directory is a 5 MB tmpfs, attacked as the issue found it:

- 404s on `/serve/<60,000-character name>` on one keep-alive connection. Before: 180,272 bytes of log per request
  (the raw path three times in the completion line) and a 60,125-byte body; the tmpfs was full after ~30 requests.
- The logs rotate within their bound under a stream of logged requests. Before: `run/logs/api.log` grew without end.
- Unreadable requests (400) and oversized heads (431), each on a new connection. Before: a line each.
- User code failing on what the client sent: a traceback each, the client's text in it. Before: one per request.
- The disk under the logs full. Before: nothing ever said that lines were lost. After: every request is answered,
  the lines are dropped, and one line says how many, from when to when and why, once there is room again.

Mounting the tmpfs needs root (developers and CI are). Each test prints its measured figures (`pytest -s`)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from services.launcher import LogFileSettings
from tests.support.disks import fill
from tests.support.servers import start_gateway_alone

ANSWER = "class Preprocess:\n    def process(self, data, state, collect=None):\n        return {'answer': 1}\n"
FAILS = "class Preprocess:\n    def process(self, data, state, collect=None):\n        raise KeyError(data['k'])\n"
"""User code that fails on what the client sent, the client's text in its exception."""
ROTATION = LogFileSettings(max_bytes=64 << 10, backups=2)
BOUND = (ROTATION.backups + 1) * ROTATION.max_bytes
BURST = 20
"""The gateway's default `SERVING_ERROR_LOG_BURST`."""
NAME = "a" * 60_000

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs for the log directory needs root")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """The gateway, every successful request logged (so that logging can be driven at will), its logs on 5 MB."""
    run = tmp_path_factory.mktemp("logs")
    logs = run / "logs"
    logs.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m,mode=0700", "tmpfs", str(logs)], check=True)
    try:
        (run / "ok.py").write_text(ANSWER)
        (run / "fails.py").write_text(FAILS)
        entries = {name: {"engine": "custom", "preprocess": f"{name}.py"} for name in ("ok", "fails")}
        (run / "endpoints.json").write_text(json.dumps({"endpoints": entries}))
        env = {
            "GATEWAY_ENDPOINTS_FILE": str(run / "endpoints.json"),
            "SERVING_OBSERVABILITY__LOG_JSON": "true",
            "SERVING_COMPLETION_LOG_SAMPLE": "1",
        }
        url, launcher = start_gateway_alone(run, env, log_files=ROTATION)
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                client.logs = logs
                yield client
        finally:
            launcher.stop_all()
    finally:
        subprocess.run(["umount", str(logs)], check=True)


def log_lines(logs: Path) -> list[str]:
    return [line for path in sorted(logs.glob("api.log*")) for line in path.read_text(errors="replace").splitlines()]


def logged(gateway: httpx.Client, request_id: str) -> None:
    """Wait until a request's line is in the log (the writer has caught up with everything before it)."""
    deadline = time.monotonic() + 30
    while not any(request_id in line for line in log_lines(gateway.logs)):
        assert time.monotonic() < deadline, f"no line of request {request_id} in the log"
        time.sleep(0.1)


def served(gateway: httpx.Client) -> str:
    answer = gateway.post("/serve/ok", json={})
    assert answer.status_code == 200, answer.text
    return answer.headers["x-request-id"]


def test_404s_with_a_60000_character_name_write_a_few_bytes_each_and_a_short_body(gateway):
    ids, bodies = set(), set()
    for _ in range(300):  # one keep-alive connection
        answer = gateway.post(f"/serve/{NAME}", json={})
        assert answer.status_code == 404
        ids.add(answer.headers["x-request-id"])
        bodies.add(len(answer.content))
    used = shutil.disk_usage(gateway.logs).used
    print(f"\nthe log directory after the 404s: {used} bytes used of 5 MB")
    assert used <= BOUND + ROTATION.max_bytes, "the logs stay within their rotation bound (and blocks)"
    logged(gateway, served(gateway))
    theirs = [line for line in log_lines(gateway.logs) if any(f'"request_id":"{i}"' in line for i in ids)]
    per_request = sum(len(line) + 1 for line in theirs) / len(ids)
    print(f"300 x 404 on /serve/<60,000 characters>: {per_request:.0f} bytes of log per request, {len(theirs)} lines")
    print(f"404 body: {max(bodies)} bytes (before: 180,272 bytes of log per request, a 60,125-byte body)")
    assert per_request < 1000 and max(bodies) < 400
    assert len(theirs) <= BURST, "the rest of one route's 404s are counted, not written"
    assert all(len(line) < 2000 for line in theirs)


def test_the_log_rotates_within_its_bound_under_a_stream_of_logged_requests(gateway):
    for _ in range(1500):  # about 700 KB of completion lines through a bound of 192 KiB
        last = served(gateway)
    logged(gateway, last)
    sizes = {path.name: path.stat().st_size for path in gateway.logs.iterdir()}
    print(f"\n1,500 logged requests: {sizes}, bound {BOUND} bytes")
    assert set(sizes) == {"api.log", "api.log.1", "api.log.2"}, sizes
    assert all(size <= ROTATION.max_bytes for size in sizes.values()) and sum(sizes.values()) <= BOUND
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in gateway.logs.iterdir())


def raw_request(url: str, data: bytes) -> bytes:
    """What the server answers to `data` sent as it is on a new connection, until it closes it."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(data)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_unreadable_requests_and_oversized_heads_on_new_connections_write_their_burst(gateway):
    url = str(gateway.base_url).rstrip("/")
    for _ in range(100):
        assert raw_request(url, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400")
        head = b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * (70 << 10) + b"\r\n\r\n"
        assert raw_request(url, head).startswith(b"HTTP/1.1 431")
    logged(gateway, served(gateway))
    lines = log_lines(gateway.logs)
    invalid = [line for line in lines if "Invalid HTTP request received." in line]
    oversized = [line for line in lines if "request line and headers over" in line]
    print(f"\n100 unreadable requests: {len(invalid)} lines; 100 oversized heads: {len(oversized)} lines")
    assert len(invalid) <= BURST and len(oversized) <= BURST


def test_user_code_failing_on_a_client_s_text_writes_its_burst_of_tracebacks(gateway):
    bodies = set()
    for _ in range(100):
        answer = gateway.post("/serve/fails", json={"k": "k" * 60_000})
        assert answer.status_code == 422
        bodies.add(len(answer.content))
    logged(gateway, served(gateway))
    failed = [line for line in log_lines(gateway.logs) if "process of endpoint 'fails' failed" in line]
    print(f"\n100 failures of user code: {len(failed)} lines of up to {max(map(len, failed))} bytes, bodies {bodies}")
    assert len(failed) <= BURST and max(map(len, failed)) < 5000 and max(bodies) < 1000


def test_a_full_disk_under_the_logs_stops_no_request_and_is_said_once(gateway):
    junk = gateway.logs / "junk"
    print(f"\nthe log directory's disk: {fill(junk)}")
    statuses = []
    try:
        for _ in range(100):
            statuses += [gateway.post(path, json={}).status_code for path in ["/serve/ok", f"/serve/{NAME}"]]
            fill(junk)  # kept full: a rotation gives the log room again by deleting its oldest file
        assert statuses == [200, 404] * 100, "every request answered while no log line can be written"
    finally:
        junk.unlink()
    deadline = time.monotonic() + 30
    while not (notices := [line for line in log_lines(gateway.logs) if "lines of this log were dropped" in line]):
        assert time.monotonic() < deadline, f"no line says lines were dropped: {sorted(gateway.logs.iterdir())}"
        served(gateway)
        time.sleep(0.1)
    logged(gateway, served(gateway))
    print(f"once there is room again: {notices}")
    (notice,) = notices
    assert "No space left on device" in notice and int(notice.split()[0]) > 50, "the 100 logged requests, about"
