"""`serving up/status/down` as a user runs them: separate processes, a detached stack, real HTTP in between."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from services.launcher import free_port
from tests.support.servers import processes_mentioning

SERVING = str(Path(sys.executable).parent / "serving")


def serving(*args: str, run_dir: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "SERVING_RUN_DIR": str(run_dir)}
    return subprocess.run(
        [SERVING, *args], capture_output=True, text=True, env=env, cwd=run_dir.parent, timeout=timeout
    )


def test_up_status_down_of_the_default_gateway_stack(tmp_path, tiny_model):
    run_dir = tmp_path / "run"
    port, http, grpc, metrics = (free_port() for _ in range(4))
    up = serving(
        "up",
        "--detach",
        "--model-dir",
        str(tiny_model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--triton-http-port",
        str(http),
        "--triton-grpc-port",
        str(grpc),
        "--triton-metrics-port",
        str(metrics),
        run_dir=run_dir,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "STACK=clearml is up" in up.stderr
        status = serving("status", run_dir=run_dir)
        assert "triton: running" in status.stderr and "gateway: running" in status.stderr
        response = httpx.post(f"http://127.0.0.1:{port}/serve/minilm", json={"text": "hello world"}, timeout=30)
        assert response.status_code == 200 and response.json()["model"] == "tiny-bert"
    finally:
        down = serving("down", run_dir=run_dir)
    assert down.returncode == 0 and "stopped" in down.stderr
    assert "nothing is running" in serving("status", run_dir=run_dir).stderr
    assert processes_mentioning(str(run_dir)) == [], "every process of the stack is gone"


def test_a_stack_that_cannot_start_fails_with_a_sentence(tmp_path):
    result = serving("up", "--detach", "--stack", "kserve", "--model-dir", str(tmp_path), run_dir=tmp_path / "run")
    assert result.returncode == 1
    assert "unknown STACK 'kserve'" in result.stderr and "Traceback" not in result.stderr
