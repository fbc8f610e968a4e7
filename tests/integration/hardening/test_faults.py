"""Faults beyond the ones each stack's tests cover: the run directory's log device full."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx

from tests.support.servers import start_http_stack, worker_pids


def test_a_full_log_device_does_not_stop_serving_nor_a_worker_restart(tmp_path, tiny_model):
    logs = tmp_path / "logs"
    logs.mkdir()
    # the run's log directory on a 256 KiB file system of its own (root can mount here, as in CI)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(logs)], check=True)
    try:
        server = start_http_stack(tmp_path, tiny_model, workers=2, env={"SERVING_OBSERVABILITY__LOG_JSON": "true"})
        try:
            descriptor = os.open(logs / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(descriptor, b"x" * 4096):
                    pass
            except OSError:
                pass  # the device is full now
            finally:
                os.close(descriptor)
            with server.client() as client:
                assert all(
                    client.post("/serve/minilm", json={"text": "still here"}).status_code == 200 for _ in range(100)
                )
                # a worker killed now: gunicorn (writing to the full device) must still replace it
                victim = sorted(worker_pids(server.pid))[0]
                os.kill(victim, signal.SIGKILL)
                deadline = time.monotonic() + 30
                while len(worker_pids(server.pid) - {victim}) < 2:
                    assert time.monotonic() < deadline, "the worker was not replaced"
                    time.sleep(0.2)
                codes = [client.post("/serve/minilm", json={"text": "after"}).status_code for _ in range(100)]
            assert set(codes) == {200}
            assert httpx.get(server.url + "/health/ready", timeout=5).status_code == 200
        finally:
            server.launcher.stop_all()
    finally:
        subprocess.run(["umount", "-l", str(logs)], check=False)
