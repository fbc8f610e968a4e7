"""Secrets fail closed, and the admin API's door, on real servers over real sockets.

- A blank admin token file, or an API keys file with no key, stops the server at start with a sentence that says
  what to do (before: the gateway answered 200 to `Authorization: Bearer` and nothing after it; an empty keys file
  served inference to anyone). So does a stale setting name: `GATEWAY_MAX_INFLIGHT` (before: silently the
  gateway's name for what the FastAPI stack reads as `SERVING_MAX_INFLIGHT`).
- A 300 MB admin body without the token is refused before it is read (before: read and parsed, 422 "JSON decode
  error", the worker's memory 218 -> 821 MB); with the token, a body over the cap gets 413 as it arrives.
Each test prints its measured figures (`pytest -s`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from services.common.errors import ConfigurationError
from services.launcher import Launcher
from services.lifecycle import transitions
from services.lifecycle.store import DeploymentStore
from tests.support.servers import start_gateway_alone, start_http_stack, worker_pids

TOKEN = "door-token-0123456789"
ATTACK_BYTES = 300 << 20
CHUNK = b"x" * (1 << 20)
PEAK_GROWTH = 64 << 20
"""How much the worker's peak memory may grow while a 300 MB body it must not keep streams past it."""


def refused_start(start: Callable[[], Launcher]) -> str:
    """The log of a server `start` must not start; one that starts is stopped and fails the test."""
    try:
        launcher = start()
    except ConfigurationError as refused:
        assert "exited with code 3 before it was ready" in refused.message, refused.message
        return refused.message
    launcher.stop_all()
    pytest.fail("the server started")


@pytest.mark.parametrize("content", ["", "  \n"])
def test_a_gateway_with_a_blank_admin_token_file_does_not_start(tmp_path, content):
    (tmp_path / "admin-token").write_text(content)
    env = {"GATEWAY_ADMIN_TOKEN_FILE": str(tmp_path / "admin-token")}
    refused_start(lambda: start_gateway_alone(tmp_path, env, timeout=60)[1])
    log = (tmp_path / "logs" / "api.log").read_text()
    assert "(GATEWAY_ADMIN_TOKEN_FILE) is empty or blank" in log and "secrets.token_urlsafe" in log


def test_a_gateway_given_a_shared_setting_under_a_gateway_name_does_not_start(tmp_path):
    refused_start(lambda: start_gateway_alone(tmp_path, {"GATEWAY_MAX_INFLIGHT": "1"}, timeout=60)[1])
    log = (tmp_path / "logs" / "api.log").read_text()
    assert "GATEWAY_MAX_INFLIGHT is not a gateway setting: every HTTP stack reads SERVING_MAX_INFLIGHT" in log


def test_a_server_with_an_api_keys_file_that_holds_no_key_does_not_start(tmp_path, tiny_model):
    (tmp_path / "keys").write_text("# the inference keys, one a line\n\n")
    env = {"SERVING_API_KEYS_FILE": str(tmp_path / "keys")}
    refused_start(lambda: start_http_stack(tmp_path, tiny_model, env=env).launcher)
    log = (tmp_path / "logs" / "api.log").read_text()
    assert "holds no key (SERVING_API_KEYS_FILE)" in log and "would leave inference open" in log


@dataclass
class Gateway:
    url: str
    pid: int

    def peak_memory(self) -> int:
        """Its worker's peak resident memory so far (VmHWM), in bytes."""
        (worker,) = worker_pids(self.pid)
        line = next(x for x in Path(f"/proc/{worker}/status").read_text().splitlines() if x.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[Gateway]:
    run = tmp_path_factory.mktemp("door")
    store = DeploymentStore.open(f"sqlite:///{run / 'lifecycle' / 'state.db'}")
    store.update(lambda s: transitions.set_auto_update(s, "emb", "m", 2))
    (run / "admin-token").write_text(TOKEN + "\n")
    env = {"SERVING_STATE_URL": store.url, "GATEWAY_ADMIN_TOKEN_FILE": str(run / "admin-token")}
    url, launcher = start_gateway_alone(run, env)
    yield Gateway(url, launcher.procs[0][1].pid)
    launcher.stop_all()


def head(authorization: str | None) -> bytes:
    """A PUT of the admin API declaring a 300 MB JSON body."""
    lines = [
        b"PUT /admin/endpoints/emb/auto-update HTTP/1.1",
        b"Host: t",
        b"Content-Type: application/json",
        b"Content-Length: %d" % ATTACK_BYTES,
    ]
    lines += [b"Authorization: " + authorization.encode()] if authorization is not None else []
    return b"\r\n".join(lines) + b"\r\n\r\n"


def read_answer(sock: socket.socket) -> tuple[int, dict]:
    """One response: its status and JSON body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"<closed>"
    response_head, body = data.split(b"\r\n\r\n", 1)
    fields = dict(line.split(b":", 1) for line in response_head.lower().split(b"\r\n")[1:])
    length = int(fields[b"content-length"])
    while len(body) < length:
        body += sock.recv(65536)
    return int(response_head.split()[1]), orjson.loads(body)


def attack(gateway: Gateway, request_head: bytes) -> tuple[int, dict, float, int]:
    """The head and the first MiB of the body; the answer, which must come before the rest is sent, and the seconds
    it took; then the other 299 MiB, all of them, on the same connection. Returns the status, the JSON answer, the
    seconds and how much the worker's peak memory grew."""
    before = gateway.peak_memory()
    parts = urlsplit(gateway.url)
    with closing(socket.create_connection((parts.hostname, parts.port), timeout=5)) as sock:
        start = time.monotonic()
        sock.sendall(request_head + CHUNK)
        status, answer = read_answer(sock)  # a timeout here: the server waits for the body before it answers
        seconds = time.monotonic() - start
        with suppress(OSError):  # the server may close the connection: it need not take the rest
            for _ in range(ATTACK_BYTES // len(CHUNK) - 1):
                sock.sendall(CHUNK)
    return status, answer, seconds, gateway.peak_memory() - before


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer wrong-token"])
def test_a_300_mb_admin_body_without_the_token_is_refused_before_it_is_read(gateway, authorization):
    status, answer, seconds, growth = attack(gateway, head(authorization))
    print(f"\n{authorization!r}: {status} after {seconds * 1000:.0f} ms, worker peak memory +{growth >> 20} MiB")
    assert status == 401 and answer["error"]["type"] == "unauthorized"
    assert growth < PEAK_GROWTH
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        listed = client.get("/admin/endpoints", headers={"Authorization": f"Bearer {TOKEN}"})
    assert listed.status_code == 200 and listed.json()["endpoints"][0]["registered_name"] == "m", "still serving"


def test_an_admin_body_over_the_cap_gets_413_as_it_arrives(gateway):
    status, answer, seconds, growth = attack(gateway, head(f"Bearer {TOKEN}"))
    print(f"\n413 after {seconds * 1000:.0f} ms, worker peak memory +{growth >> 20} MiB")
    assert status == 413 and answer["error"]["type"] == "payload_too_large" and "65536" in answer["error"]["message"]
    assert growth < PEAK_GROWTH
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        changed = client.put("/admin/endpoints/emb/auto-update", json={"name": "m", "max_versions": 3}, headers=auth)
    assert changed.status_code == 200 and changed.json()["max_versions"] == 3
