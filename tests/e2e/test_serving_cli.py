"""`serving up/status/down` as a user runs them: separate processes, a detached stack, real HTTP in between."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.launcher import free_port
from tests.e2e.test_cli_forms import Lifecycle, run_documented_commands
from tests.support.servers import processes_mentioning

SERVING = str(Path(sys.executable).parent / "serving")


def serving(*args: str, run_dir: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "SERVING_RUN_DIR": str(run_dir)}
    return subprocess.run(
        [SERVING, *args], capture_output=True, text=True, env=env, cwd=run_dir.parent, timeout=timeout
    )


@dataclass
class Stack:
    run_dir: Path
    port: int
    grpc: int
    model_dir: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_model) -> Iterator[Stack]:
    """The default stack, started as a user starts it (`serving up --detach`), stopped at the end if still up."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
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
        "--controller-metrics-port",
        str(free_port()),
        run_dir=run_dir,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "STACK=clearml is up" in up.stderr
        yield Stack(run_dir, port, grpc, tiny_model)
    finally:
        if processes_mentioning(str(run_dir)):
            serving("down", run_dir=run_dir)


@pytest.fixture(scope="module")
def trained(stack: Stack) -> Stack:
    """The stack after the README's lifecycle example ran on it (version 1 of `sentiment` live)."""
    lifecycle_walkthrough(stack.run_dir, stack.port)
    return stack


def test_status_shows_the_default_gateway_stack_up_and_serving(stack: Stack):
    run_dir, port = stack.run_dir, stack.port
    status = json.loads(serving("status", "--json", run_dir=run_dir).stdout)
    processes = {p["name"]: p for p in status["processes"]}
    assert {name: p["state"] for name, p in processes.items()} == {
        "triton": "running",
        "gateway": "running",
        "controller": "running",
        "supervisor": "running",
    }
    assert all(p["ready"] for p in processes.values())
    assert processes["gateway"]["ports"] == [port] and processes["gateway"]["uptime_seconds"] >= 0
    assert status["model"]["name"] == "tiny-bert" and status["endpoints"] == ["tiny-bert"]
    # the endpoint takes the model's name: this is not all-MiniLM-L6-v2, so it is not /serve/minilm
    assert status["urls"]["serve"] == f"http://127.0.0.1:{port}/serve/tiny-bert"
    response = httpx.post(status["urls"]["serve"], json={"text": "hello world"}, timeout=30)
    assert response.status_code == 200 and response.json()["model"] == "tiny-bert"
    table = serving("status", run_dir=run_dir).stdout
    assert "gateway" in table and "running" in table and "/serve/tiny-bert" in table
    deadline = time.monotonic() + 60  # the controller serves its /metrics once its registry is open
    while True:
        try:
            metrics = httpx.get(status["urls"]["controller_metrics"], timeout=5).text
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the controller's /metrics never answered"
            time.sleep(0.5)
    assert "serving_registry_up 1.0" in metrics, "what Prometheus' controller job scrapes, with no Prometheus set"


def test_the_lifecycle_example_runs_and_leaves_the_run_directory_private(trained: Stack):
    assert_private(trained.run_dir)


def test_every_documented_lifecycle_command_runs_as_typed(trained: Stack, tmp_path):
    """The docs' `serving model|endpoints|metrics` commands, as typed, on this stack (tests/e2e/test_cli_forms.py)."""
    lifecycle = Lifecycle(
        trained.run_dir, f"http://127.0.0.1:{trained.port}", f"127.0.0.1:{trained.grpc}", trained.model_dir
    )
    run_documented_commands(lifecycle, tmp_path)


def test_down_stops_every_process_of_the_stack(stack: Stack):
    down = serving("down", run_dir=stack.run_dir)
    assert down.returncode == 0 and "stopped" in down.stderr
    assert "nothing is running" in serving("status", run_dir=stack.run_dir).stdout
    assert processes_mentioning(str(stack.run_dir)) == [], "every process of the stack is gone"


def lifecycle_walkthrough(run_dir: Path, port: int) -> None:
    """The README's lifecycle example: train and register a classifier, deploy it by auto-update, follow its
    lineage back to the pipeline run and the data set, see it in the MLflow UI."""
    url = f"http://127.0.0.1:{port}"
    trained = serving("train", "--train-rows", "32", "--epochs", "1", run_dir=run_dir)  # the docs' version 1
    assert trained.returncode == 0, trained.stderr[-2000:]
    registered = json.loads(trained.stdout)
    assert registered["name"] == "sentiment" and registered["version"] == "1"
    assert registered["accuracy"] < 0.8, "version 1 is the weak one a better version 2 is compared with"
    update = serving("model", "auto-update", "sentiment", "--name", "sentiment", "--url", url, run_dir=run_dir)
    assert update.returncode == 0, update.stderr
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        answer = httpx.post(f"{url}/serve/sentiment", json={"text": "The food was wonderful."}, timeout=30)
        if answer.status_code == 200:
            break
        time.sleep(0.5)
    assert answer.status_code == 200, answer.text
    assert answer.json()["label"] == "positive" and answer.headers["x-model-version"] == "1"
    lineage = httpx.get(f"{url}/models/sentiment", timeout=10).json()["versions"][0]
    assert lineage["pipeline"]["id"] == registered["pipeline_run_id"]
    assert [step["name"] for step in lineage["pipeline"]["steps"]] == [
        "1 prepare",
        "2 train",
        "3 evaluate",
        "4 register",
    ]
    assert lineage["datasets"][0]["name"] == "sentiment" and len(lineage["datasets"][0]["digest"]) == 16
    listed = serving("model", "list", "--json", "--url", url, run_dir=run_dir)
    assert json.loads(listed.stdout)[0]["versions"][0]["state"] == "live"
    ui_port = free_port()
    ui = serving("registry", "--port", str(ui_port), run_dir=run_dir)
    assert ui.returncode == 0, ui.stderr
    models = httpx.get(f"http://127.0.0.1:{ui_port}/ajax-api/2.0/mlflow/registered-models/search", timeout=30)
    assert [m["name"] for m in models.json()["registered_models"]] == ["sentiment"]


PRIVATE = {
    ".": 0o700,
    "lifecycle": 0o700,
    "lifecycle/state.db": 0o600,
    "mlflow": 0o700,
    "mlflow/mlflow.db": 0o600,
    "admin-token": 0o600,
    "supervisor-options.json": 0o600,
}
"""The run directory, its databases and its secrets, each with the mode `serving up` and `serving train` give it."""


def assert_private(run_dir: Path) -> None:
    """Others cannot enter the run directory, and its databases and secrets are their owner's alone, although the
    commands ran under the umask 022 of this test."""
    modes = {name: (run_dir / name).stat().st_mode & 0o777 for name in PRIVATE}
    assert modes == PRIVATE, {name: oct(mode) for name, mode in modes.items()}
    journals = [p for p in run_dir.rglob("*.db-*") if p.stat().st_mode & 0o077]
    assert journals == [], "SQLite's journal files take their database's mode"


def test_a_stack_that_cannot_start_fails_with_a_sentence(tmp_path):
    result = serving("up", "--detach", "--stack", "kserve", "--model-dir", str(tmp_path), run_dir=tmp_path / "run")
    assert result.returncode == 2
    assert "unknown STACK 'kserve'" in result.stderr and "Traceback" not in result.stderr
