"""The lifecycle stack of tests/integration/lifecycle: STACK=clearml started as separate processes with an embedded
MLflow registry beside it, and the helpers its tests drive it with (admin calls, waits, traffic)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from loadtest import engine
from loadtest.targets import build_targets
from services.launcher import Launcher, free_port
from services.registry.mlflow_registry import ModelRegistry
from services.registry.settings import RegistrySettings
from services.stacks import StackOptions, stack_processes
from services.triton.server import TritonPorts

TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "a man is eating food"]


class Stack:
    def __init__(self, run_dir: Path, model_dir: Path):
        ports = TritonPorts(free_port(), free_port(), free_port())
        self.options = StackOptions(
            stack="clearml",
            host="127.0.0.1",
            port=free_port(),
            model_dir=model_dir,
            run_dir=run_dir,
            triton_ports=ports,
            controller_metrics_port=free_port(),
            endpoints_file=run_dir / "endpoints.json",
            grpc_port=0,  # HTTP only: tests running at once would share 8081 (SO_REUSEPORT)
        )
        self.launcher = Launcher(run_dir)
        self.specs = stack_processes(self.options)
        for spec in self.specs:
            self.launcher.start_ready(spec, detach=True, timeout=180)
        self.url = f"http://127.0.0.1:{self.options.port}"
        self.triton = f"http://127.0.0.1:{ports.http}"
        self.headers = {"Authorization": f"Bearer {(run_dir / 'admin-token').read_text().strip()}"}
        self.registry = ModelRegistry(
            RegistrySettings(
                tracking_uri=f"sqlite:///{run_dir.resolve()}/mlflow/mlflow.db",
                artifact_root=run_dir / "mlflow" / "artifacts",
            )
        )

    def admin(self, method: str, path: str, body: dict | None = None) -> dict:
        response = httpx.request(method, f"{self.url}/admin{path}", json=body, headers=self.headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    def versions(self) -> dict[str, dict]:
        return {v["version"]: v for v in httpx.get(f"{self.url}/models/emb", timeout=10).json()["versions"]}

    def wait_for(self, what: str, check, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.25)
        log = (self.options.run_dir / "logs" / "controller.log").read_text()[-3000:]
        raise AssertionError(f"{what} did not happen within {timeout:.0f}s; controller log:\n{log}")

    def serve(self, key: str | None = None) -> httpx.Response:
        headers = {"x-canary-key": key} if key else {}
        return httpx.post(f"{self.url}/serve/emb", json={"text": "hello world"}, headers=headers, timeout=30)

    def controller(self):
        return next((spec, proc) for spec, proc in self.launcher.procs if spec.name == "controller")


CHUNK_S = 2.0
"""With a stop event, the attack runs in open-loop pieces this long and checks the event between them."""


def attack_in_background(stack: Stack, seconds: float, rate: float = 50, stop: threading.Event | None = None):
    """Open-loop traffic at `rate` in a thread for `seconds`; with `stop`, ends within CHUNK_S of it being set (the
    test waits for what it watches instead of the longest it might take)."""
    results: list = []
    targets = build_targets(stack.url, "serve", TEXTS, endpoint="emb")

    def attack() -> None:
        if stop is None:
            engine.attack(engine.AttackSpec(targets=targets, rate=rate, duration=seconds, timeout=30), results.append)
            return
        deadline = time.monotonic() + seconds
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            piece = engine.AttackSpec(targets=targets, rate=rate, duration=min(CHUNK_S, left), timeout=30)
            engine.attack(piece, results.append)

    thread = threading.Thread(target=attack, daemon=True)
    thread.start()
    return thread, results


def register_dir(stack: Stack, model_dir: Path, run_name: str) -> str:
    """Register an exported model directory as it is (no export, no checks): how a broken upload would arrive."""
    mlflow = stack.registry.mlflow
    with mlflow.start_run(experiment_id=stack.registry.experiment_id(), run_name=run_name) as run:
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
    created = stack.registry.client.create_model_version(
        "tiny-emb", source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id
    )
    return str(created.version)


def broken_model(tmp_path: Path) -> Path:
    """An exported model that fails about half of real traffic: its manifest promises 64 tokens, its model has 24
    positions. It passes every deployment check (the warm-up texts have at most 23 tokens) and fails every request
    longer than 24 tokens. (With 16 positions the controller's own check fails it: rejected at deployment, never
    served.)"""
    from services.common.contract import Manifest
    from services.modelbuild.export import build
    from services.modelbuild.tiny import write_tiny_checkpoint

    model_dir = tmp_path / "broken-model"
    build(model_dir, write_tiny_checkpoint(tmp_path / "short", seed=5, max_length=24))
    manifest = Manifest.load(model_dir)
    manifest.max_seq_length = 64  # the manifest is not among its own hashed files: nothing else notices
    manifest.save(model_dir)
    return model_dir
