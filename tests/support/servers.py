"""Real servers on free ports: the HTTP stacks (gunicorn + uvicorn workers), the gateway and Triton, started with
the same launcher and process specs as `make up`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import numpy as np

from services.common.contract import Manifest
from services.launcher import Launcher, LogFileSettings, free_port
from services.stacks import StackOptions, http_service
from services.triton.server import TritonPorts


@dataclass
class Server:
    url: str
    launcher: Launcher
    manifest: Manifest
    grpc_address: str | None = None
    """`HOST:PORT` of the Open Inference Protocol over gRPC (the gateway's)."""

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)

    @property
    def pid(self) -> int:
        return self.launcher.procs[0][1].pid


def start_http_stack(
    tmp_path: Path,
    model_dir: Path,
    *,
    workers: int = 1,
    env: dict[str, str] | None = None,
    app: str = "services.fastapi_stack.app:create_app()",
) -> Server:
    port = free_port()
    options = StackOptions(workers=workers, host="127.0.0.1", port=port, model_dir=model_dir, run_dir=tmp_path)
    # Tests call the built-in endpoint `minilm` whatever the model, as the README's examples do; by default a server
    # names it after its model (tests/e2e checks that).
    env = {"SERVING_ENDPOINT": "minilm", **(env or {})}
    spec = http_service(options, name="api", app=app, extra_env=env)
    spec.stop_timeout = 15
    launcher = Launcher(tmp_path)
    launcher.start_ready(spec, detach=True, timeout=90)
    return Server(f"http://127.0.0.1:{port}", launcher, Manifest.load(model_dir))


@dataclass
class TritonServer:
    http_url: str
    grpc_url: str
    metrics_url: str
    launcher: Launcher
    ports: TritonPorts | None = None

    @property
    def pid(self) -> int:
        return self.launcher.procs[0][1].pid

    def stop(self) -> None:
        self.launcher.stop_all()


def start_triton(
    tmp_path: Path,
    model_dir: Path,
    render_options=None,
    models: tuple[str, ...] = ("tokenizer", "encoder", "ensemble"),
    extra_args: list[str] | None = None,
    *,
    address: str | None = None,
    ports: TritonPorts | None = None,
) -> TritonServer:
    """The real tritonserver from the nvidia-pytriton wheel, on `ports` (a stopped server's, to start it again) or
    free ones, bound to `address`: another loopback address is another host, and several may share ports."""
    from services.stacks import triton_service

    ports = ports or TritonPorts(free_port(), free_port(), free_port())
    ports = replace(ports, address=address or ports.address)
    address = ports.address
    options = StackOptions(stack="triton", model_dir=model_dir, run_dir=tmp_path, triton_ports=ports)
    spec = triton_service(options, models=list(models), render_options=render_options)
    spec.argv += extra_args or []
    launcher = Launcher(tmp_path)
    launcher.start_ready(spec, detach=True, timeout=120)
    return TritonServer(
        f"http://{address}:{ports.http}",
        f"{address}:{ports.grpc}",
        f"http://{address}:{ports.metrics}/metrics",
        launcher,
        ports,
    )


def triton_metric(server: TritonServer, name: str, model: str) -> float:
    text = httpx.get(server.metrics_url, timeout=10).text
    prefix = f'{name}{{model="{model}",version="1"}}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def stub_shared_memory(server: TritonServer | Path) -> list[Path]:
    """The shared-memory files of the Python-backend stubs of `server` (or of the Triton run from that directory):
    their command lines name them, and a Triton killed with -9 leaves them in /dev/shm."""
    run_dir = server if isinstance(server, Path) else server.launcher.run_dir
    lines = processes_mentioning(str(run_dir))
    return [Path("/dev/shm") / word for line in lines for word in line.split() if word.startswith("triton_python_")]


def remove_files(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def start_gateway(
    tmp_path: Path, model_dir: Path, triton: TritonServer, *, workers: int = 2, env: dict[str, str] | None = None
) -> Server:
    """STACK=clearml's gateway (gunicorn + uvicorn workers) in front of a running Triton, its gRPC on a free port."""
    grpc_port = free_port()
    settings = {
        "GATEWAY_TRITON_GRPC_URL": triton.grpc_url,
        "GATEWAY_GRPC_PORT": str(grpc_port),
        "GATEWAY_ENDPOINTS_FILE": str(tmp_path / "endpoints.json"),
        "GATEWAY_ENDPOINTS_POLL_INTERVAL": "0.2",
        **(env or {}),
    }
    server = start_http_stack(
        tmp_path,
        model_dir,
        workers=workers,
        env=settings,
        app="services.gateway.app:create_app()",
    )
    return replace(server, grpc_address=f"127.0.0.1:{settings['GATEWAY_GRPC_PORT']}")


def start_gateway_alone(
    run: Path, env: dict[str, str], *, timeout: float = 90, log_files: LogFileSettings | None = None
) -> tuple[str, Launcher]:
    """The gateway (one worker) without Triton or a built-in model, ready once its worker answers /health/live (its
    /health/ready says 503): enough for its admin API, its configured `custom` endpoints and its HTTP edge. Returns
    its URL and the launcher that stops it; raises, with the log's last lines, if it does not start. `log_files`: how
    its log rotates (default: `SERVING_LOG_*`)."""
    port = free_port()
    options = StackOptions(workers=1, host="127.0.0.1", port=port, model_dir=run / "none", run_dir=run)
    settings = {"GATEWAY_TRITON_GRPC_URL": "127.0.0.1:1", "GATEWAY_GRPC_PORT": "0", **env}
    spec = http_service(options, name="api", app="services.gateway.app:create_app()", extra_env=settings)
    spec.ready_url = f"http://127.0.0.1:{port}/health/live"
    launcher = Launcher(run, log_files)
    launcher.start_ready(spec, detach=True, timeout=timeout)
    return f"http://127.0.0.1:{port}", launcher


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


def worker_pids(master_pid: int) -> set[int]:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children")
    return {int(pid) for pid in children.read_text().split()} if children.exists() else set()


def assert_tritonclient_http_works(url: str, texts: list[str], expected: np.ndarray, model: str = "minilm") -> None:
    """The Open Inference Protocol as Triton's own HTTP client speaks it, JSON and binary tensors."""
    import tritonclient.http as tritonhttp

    client = tritonhttp.InferenceServerClient(url.removeprefix("http://"))
    assert client.is_server_ready() and client.is_model_ready(model)
    assert client.get_model_metadata(model)["outputs"][0]["shape"] == [-1, expected.shape[-1]]
    for binary in (True, False):
        tensor = tritonhttp.InferInput("TEXT", [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=object), binary_data=binary)
        out = tritonhttp.InferRequestedOutput("embedding", binary_data=binary)
        got = client.infer(model, [tensor], outputs=[out]).as_numpy("embedding")
        assert np.abs(got - expected).max() <= 1e-5
