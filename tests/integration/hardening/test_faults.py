"""Faults beyond the ones each stack's tests cover: the run directory's log device full."""

from __future__ import annotations

import os
import signal
import time

import httpx

from tests.support.disks import fill, tmpfs
from tests.support.servers import start_http_stack, worker_pids


def replace(server, victim: int, timeout: float) -> None:
    """Kill worker `victim` and wait until gunicorn has started another in its place."""
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while len(worker_pids(server.pid) - {victim}) < 2:
        assert time.monotonic() < deadline, "the worker was not replaced"
        time.sleep(0.2)


def test_a_full_log_device_does_not_stop_serving_nor_a_worker_restart(tmp_path, tiny_model):
    # the run's log directory on a 256 KiB file system of its own
    with tmpfs(tmp_path / "logs", "size=256k") as logs:
        server = start_http_stack(tmp_path, tiny_model, workers=2, env={"SERVING_OBSERVABILITY__LOG_JSON": "true"})
        try:
            fill(logs / "filler")
            with server.client() as client:
                assert all(
                    client.post("/serve/minilm", json={"text": "still here"}).status_code == 200 for _ in range(100)
                )
                # a worker killed now: gunicorn (writing to the full device) must still replace it
                replace(server, sorted(worker_pids(server.pid))[0], 30)
                codes = [client.post("/serve/minilm", json={"text": "after"}).status_code for _ in range(100)]
            assert set(codes) == {200}
            assert httpx.get(server.url + "/health/ready", timeout=5).status_code == 200
        finally:
            server.launcher.stop_all()


def test_a_full_run_directory_disk_stops_no_request_nor_a_worker_restart(tmp_path, tiny_model):
    """Before: the workers' prometheus-client files were memory-mapped under the run directory, and a worker that
    touched a page the full disk could not back died of SIGBUS, as did every worker gunicorn started in its place."""
    with tmpfs(tmp_path / "run", "size=16m,mode=0700") as run:
        server = start_http_stack(run, tiny_model, workers=2, env={"SERVING_OBSERVABILITY__LOG_JSON": "true"})
        try:
            with server.client() as client:
                assert client.post("/serve/minilm", json={"text": "before"}).status_code == 200
                print(f"\nthe run directory's disk: {fill(run / 'filler')}")
                for victim in sorted(worker_pids(server.pid)):  # each worker replaced on the full disk
                    replace(server, victim, 60)
                workers = worker_pids(server.pid)
                codes = [client.post("/serve/minilm", json={"text": f"after {i}"}).status_code for i in range(100)]
                codes += [client.post("/serve/nothing-here", json={"text": "x"}).status_code]
                codes += [client.get(path).status_code for path in ("/metrics", "/health/ready")]
            assert codes == [200] * 100 + [404, 200, 200], codes
            assert worker_pids(server.pid) == workers, "no worker died after its start"
        finally:
            server.launcher.stop_all()
