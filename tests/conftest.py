"""Shared fixtures: tiny models exported once per session, and real servers on free ports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.common.contract import Manifest
from services.launcher import Launcher, free_port
from services.stacks import StackOptions, http_service

ROOT = Path(__file__).resolve().parent.parent
REAL_MODEL = ROOT / "build" / "model"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer random BERT embedding model, exported to ONNX (checkpoint at <out>/../checkpoint)."""
    from services.modelbuild.export import build
    from services.modelbuild.tiny import write_tiny_checkpoint

    base = tmp_path_factory.mktemp("tiny-embedding")
    checkpoint = write_tiny_checkpoint(base / "checkpoint", task="embedding")
    build(base / "model", checkpoint, name="tiny-bert")
    return base / "model"


@pytest.fixture(scope="session")
def tiny_classifier(tmp_path_factory) -> Path:
    from services.modelbuild.export import build
    from services.modelbuild.tiny import write_tiny_checkpoint

    base = tmp_path_factory.mktemp("tiny-classifier")
    checkpoint = write_tiny_checkpoint(base / "checkpoint", task="classification")
    build(base / "model", checkpoint, name="tiny-classifier")
    return base / "model"


@pytest.fixture(scope="session")
def real_model() -> Path:
    """The real all-MiniLM-L6-v2 export made by `make model` (which `make test` runs first)."""
    if not (REAL_MODEL / "manifest.json").is_file():
        from services.modelbuild.export import build

        build(REAL_MODEL)
    return REAL_MODEL


@dataclass
class Server:
    url: str
    launcher: Launcher
    manifest: Manifest

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)

    @property
    def pid(self) -> int:
        return self.launcher.procs[0][1].pid


def start_http_stack(tmp_path: Path, model_dir: Path, *, workers: int = 1, env: dict[str, str] | None = None,
                     app: str = "services.fastapi_stack.app:create_app()", env_prefix: str = "SERVING_") -> Server:
    port = free_port()
    options = StackOptions(workers=workers, host="127.0.0.1", port=port, model_dir=model_dir, run_dir=tmp_path)
    spec = http_service(options, name="api", app=app, env_prefix=env_prefix, extra_env=env)
    spec.stop_timeout = 15
    launcher = Launcher(tmp_path)
    launcher.start_ready(spec, detach=True, timeout=90)
    return Server(f"http://127.0.0.1:{port}", launcher, Manifest.load(model_dir))


@pytest.fixture(scope="module")
def fastapi_server(tmp_path_factory, tiny_model) -> Iterator[Server]:
    """STACK=fastapi with two workers serving the tiny model."""
    server = start_http_stack(tmp_path_factory.mktemp("fastapi"), tiny_model, workers=2)
    yield server
    server.launcher.stop_all()


def pytest_configure(config):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class TritonServer:
    http_url: str
    grpc_url: str
    metrics_url: str
    launcher: Launcher

    def stop(self) -> None:
        self.launcher.stop_all()


def start_triton(tmp_path: Path, model_dir: Path, render_options=None,
                 models: tuple[str, ...] = ("tokenizer", "encoder", "ensemble"),
                 extra_args: list[str] | None = None) -> TritonServer:
    """The real tritonserver from the nvidia-pytriton wheel, on free ports."""
    from services.stacks import triton_service
    from services.triton.server import TritonPorts

    ports = TritonPorts(free_port(), free_port(), free_port())
    options = StackOptions(stack="triton", model_dir=model_dir, run_dir=tmp_path, triton_ports=ports)
    spec = triton_service(options, models=list(models), render_options=render_options)
    spec.argv += extra_args or []
    launcher = Launcher(tmp_path)
    launcher.start_ready(spec, detach=True, timeout=120)
    return TritonServer(f"http://127.0.0.1:{ports.http}", f"127.0.0.1:{ports.grpc}",
                        f"http://127.0.0.1:{ports.metrics}/metrics", launcher)


def triton_metric(server: TritonServer, name: str, model: str) -> float:
    text = httpx.get(server.metrics_url, timeout=10).text
    prefix = f'{name}{{model="{model}",version="1"}}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain `text` (to prove a stop left nothing behind)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


def start_gateway(tmp_path: Path, model_dir: Path, triton: TritonServer, *, workers: int = 2,
                  env: dict[str, str] | None = None) -> Server:
    """STACK=clearml's gateway (gunicorn + uvicorn workers) in front of a running Triton."""
    settings = {"GATEWAY_TRITON_GRPC_URL": triton.grpc_url, "GATEWAY_ENDPOINTS_FILE": str(tmp_path / "endpoints.json"),
                "GATEWAY_ENDPOINTS_POLL_INTERVAL": "0.2", **(env or {})}
    return start_http_stack(tmp_path, model_dir, workers=workers, env=settings,
                            app="services.gateway.app:create_app()", env_prefix="GATEWAY_")


def worker_pids(master_pid: int) -> set[int]:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children")
    return {int(pid) for pid in children.read_text().split()} if children.exists() else set()
