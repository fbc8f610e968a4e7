"""A store that lost its state is not an empty state, with real parts: the real Triton, a real gateway of two workers
serving endpoint `encoder` from the embedded SQLite store, traffic from a client thread over new connections (any
worker answers each request), and `serving state` run as real processes.

The store emptied and a worker killed (gunicorn starts a new one on the emptied file), the store set back to an older
revision, the store corrupted and restored from a backup: not one request fails, `/health/ready` says what happened
and what to do, `serving_state_store_regressed` is 1, the log says it at ERROR, and a restore is followed again."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from services.lifecycle.deployments import EndpointState, VersionState
from services.lifecycle.store import DeploymentStore
from services.triton.repository import RenderOptions
from tests.support.servers import Server, start_gateway, start_triton, worker_pids
from tests.support.state import controllers_copy

SERVING = Path(sys.executable).parent / "serving"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_model):
    """Triton's encoder, deployed as endpoint `encoder` (version 1 live) in the store of the gateway's run directory;
    a good backup of it at `backup`."""
    run = tmp_path_factory.mktemp("lost-gateway")
    path = run / "lifecycle" / "state.db"
    store = DeploymentStore.open(f"sqlite:///{path}")
    copy = controllers_copy(run / "lifecycle" / "models", "encoder", "1", tiny_model)
    live = VersionState(version="1", state="live", model_dir=str(copy))
    store.update(lambda s: s.endpoints.update(encoder=EndpointState(versions={"1": live})))
    triton = start_triton(
        tmp_path_factory.mktemp("lost-triton"), tiny_model, RenderOptions(batching=True), models=("encoder",)
    )
    env = {"SERVING_STATE_URL": store.url, "GATEWAY_CONTROLLER_MODELS_DIR": str(run / "lifecycle" / "models")}
    gateway = start_gateway(run, tiny_model, triton, workers=2, env=env)
    gateway.run, gateway.path, gateway.store = run, path, store
    gateway.env = {**os.environ, "SERVING_STATE_URL": store.url}
    gateway.backup = run / "good.db"
    with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(gateway.backup)) as copy:
        source.backup(copy)  # what `serving state backup` does (tested below)
    yield gateway
    gateway.launcher.stop_all()
    triton.stop()


def serving(stack: Server, *argv: str) -> subprocess.CompletedProcess:
    """`serving state ...` as an operator runs it, with the stack's SERVING_STATE_URL."""
    result = subprocess.run(
        [str(SERVING), "state", *argv], env=stack.env, cwd=stack.run, capture_output=True, text=True, timeout=60
    )
    print(f"\n$ serving state {' '.join(argv)} -> {result.returncode}: {(result.stdout + result.stderr).strip()}")
    return result


def ready(stack: Server) -> tuple[int, dict]:
    answer = httpx.get(f"{stack.url}/health/ready", timeout=10)
    return answer.status_code, answer.json()


def metric(stack: Server, name: str) -> float | None:
    text = httpx.get(f"{stack.url}/metrics", timeout=10).text
    found = re.search(rf'^{name}\{{backend="sqlite"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def settled(check: Callable[[], bool], timeout: float, times: int = 10) -> None:
    """`check` held `times` times in a row (new connections: both workers answered)."""
    deadline, row = time.monotonic() + timeout, 0
    while row < times:
        assert time.monotonic() < deadline, f"not settled within {timeout}s"
        row = row + 1 if check() else 0
        time.sleep(0.02)


class Traffic:
    """Two client threads sending requests to `/serve/encoder`, each on a new connection, until stopped."""

    def __init__(self, stack: Server):
        self.url, self.codes = f"{stack.url}/serve/encoder", Counter()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._send, daemon=True) for _ in range(2)]
        for thread in self.threads:
            thread.start()

    def sent(self) -> int:
        return sum(self.codes.values())

    def _send(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.codes[httpx.post(self.url, json={"text": "hello world"}, timeout=30).status_code] += 1
            except httpx.HTTPError as exc:
                self.codes[type(exc).__name__] += 1

    def stop(self) -> Counter:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=60)
        return self.codes


def store_state(stack: Server) -> str:
    return ready(stack)[1]["state_store"]


def restored(stack: Server) -> None:
    """The store back to the good backup, every worker following it."""
    assert serving(stack, "restore", str(stack.backup)).returncode == 0
    settled(lambda: store_state(stack) == "ok", timeout=15)


def test_an_emptied_store_and_a_restarted_worker_drop_no_endpoint(stack):
    """The attack: the store's file truncated to 0 bytes, one gateway worker stopped (gunicorn starts another on the
    emptied file). Every request is answered by the last good state; nothing recreates the store. The worker stops on
    SIGTERM, finishing what it holds: with SIGKILL the request it was answering failed with it, whatever the store."""
    traffic = Traffic(stack)
    time.sleep(1)
    stack.path.write_bytes(b"")
    master = stack.pid
    before = worker_pids(master)
    os.kill(sorted(before)[0], signal.SIGTERM)
    deadline = time.monotonic() + 60
    while len(worker_pids(master) - before) < 1 or len(worker_pids(master)) < 2:
        assert time.monotonic() < deadline, "gunicorn did not start a new worker"
        time.sleep(0.1)
    settled(lambda: ready(stack)[0] == 200, timeout=60)  # both workers answer, the new one too
    since_restart = traffic.sent()
    time.sleep(3)  # traffic on the new worker too
    codes = traffic.stop()
    print(f"\nstore emptied, a worker restarted: {dict(codes)}, {traffic.sent() - since_restart} after the new worker")
    assert codes == {200: sum(codes.values())} and traffic.sent() - since_restart >= 10, codes
    settled(lambda: store_state(stack).startswith("lost: "), timeout=10)
    status, body = ready(stack)
    print(f"/health/ready {status}: {body}")
    assert status == 200 and "encoder" in body["endpoints"]
    assert "restore a backup with `serving state restore FILE`" in body["state_store"]
    assert metric(stack, "serving_state_store_regressed") == 1.0
    log = (stack.run / "logs" / "api.log").read_text()
    assert re.search(r"ERROR.*lost its state", log), log[-2000:]
    assert stack.path.stat().st_size == 0, "no process created tables in it"
    restored(stack)
    assert metric(stack, "serving_state_store_regressed") == 0.0


def test_an_older_revision_is_not_applied_until_an_operator_accepts_it(stack):
    stack.store.update(lambda s: s.endpoints.setdefault("later", EndpointState()))
    stack.store.update(lambda s: s.endpoints.pop("encoder"))  # the newest state serves no encoder
    settled(lambda: httpx.post(f"{stack.url}/serve/encoder", json={"text": "a"}).status_code == 404, timeout=10)
    with sqlite3.connect(stack.path) as conn:  # an old copy of the state, with the encoder, put back by hand
        conn.execute("UPDATE serving_deployment_state SET revision = 1, document = ?", (good_document(stack),))
    time.sleep(1.5)  # the workers polled it several times
    codes = {httpx.post(f"{stack.url}/serve/encoder", json={"text": "a"}).status_code for _ in range(10)}
    assert codes == {404}, "the older state is not applied: the newest one serves on"
    settled(lambda: "older than revision 3" in store_state(stack), timeout=10)
    assert metric(stack, "serving_state_store_regressed") == 1.0
    assert serving(stack, "accept").returncode == 0
    settled(lambda: httpx.post(f"{stack.url}/serve/encoder", json={"text": "a"}).status_code == 200, timeout=10)
    assert store_state(stack) == "ok"


def good_document(stack: Server) -> str:
    with sqlite3.connect(stack.backup) as conn:
        return conn.execute("SELECT document FROM serving_deployment_state").fetchone()[0]


def test_backup_then_corrupt_then_restore_under_load_fails_no_request(stack):
    traffic = Traffic(stack)
    time.sleep(1)
    backup = stack.run / "under-load.db"
    assert serving(stack, "backup", str(backup)).returncode == 0
    stack.store.update(lambda s: s.endpoints.setdefault("after-backup", EndpointState()))
    stack.path.write_bytes(b"\x00garbage" * 4096)
    settled(lambda: store_state(stack).startswith("lost: "), timeout=10)
    assert serving(stack, "restore", str(backup)).returncode == 0
    settled(lambda: store_state(stack) == "ok", timeout=15)
    time.sleep(1)
    codes = traffic.stop()
    print(f"\nbackup, corrupt, restore under load: {dict(codes)}")
    assert codes == {200: sum(codes.values())} and codes[200] >= 20, codes
    assert "after-backup" not in DeploymentStore.open(stack.store.url).read().endpoints, "the backup's state"
