"""Hosts of a scaled-out installation as the tests start them, each bound to its own loopback address with its own
run directory: MLflow's tracking server proxying the artifacts (`--serve-artifacts`: replicas fetch over HTTP), a
Triton replica with its agent (`serving triton-agent`), and the controller placing through the agents. Process specs
for `services.launcher.Launcher`, as `serving up` starts its own."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

from services.launcher import ProcessSpec, free_port
from services.triton.server import TritonPorts

BIN = Path(sys.executable).parent


def tracking_server(run_dir: Path, address: str, port: int) -> ProcessSpec:
    """MLflow's tracking server with its own SQLite store, serving the artifacts it keeps under `run_dir` through its
    HTTP proxy (clients never see the path). MLflow 3 answers 403 to a Host header it does not know: its address."""
    argv = [
        str(BIN / "mlflow"),
        "server",
        "--backend-store-uri",
        f"sqlite:///{(run_dir / 'mlflow.db').resolve()}",
        "--serve-artifacts",
        "--artifacts-destination",
        str((run_dir / "artifacts").resolve()),
        "--host",
        address,
        "--port",
        str(port),
        "--workers",
        "1",
        "--allowed-hosts",
        f"{address}:{port}",
    ]
    return ProcessSpec(
        name="mlflow",
        argv=argv,
        env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},  # no job runner processes: ready in ~6 s, not ~8
        ports=[port],
        ready_url=f"http://{address}:{port}/health",
        stop_timeout=10,
    )


def agent_host(
    run_dir: Path,
    address: str,
    ports: TritonPorts,
    *,
    state_url: str,
    tracking_uri: str,
    interval: float = 0.5,
    env: dict[str, str] | None = None,
) -> ProcessSpec:
    """`serving triton-agent` for a replica at `address`: ready once its Triton is (which it starts only holding every
    live version); `env`: more settings (`SUPERVISE_*` for its Triton's supervisor)."""
    settings = {
        "SERVING_RUN_DIR": str(run_dir.resolve()),
        "SERVING_STATE_URL": state_url,
        "MLFLOW_TRACKING_URI": tracking_uri,
        "AGENT_ADDRESS": address,
        "AGENT_HTTP_PORT": str(ports.http),
        "AGENT_GRPC_PORT": str(ports.grpc),
        "AGENT_METRICS_PORT": str(ports.metrics),
        "AGENT_INTERVAL": str(interval),
        **(env or {}),
    }
    return ProcessSpec(
        name="triton-agent",
        argv=[str(BIN / "serving"), "triton-agent"],
        env=settings,
        ready_url=f"http://{address}:{ports.http}/v2/health/ready",
        stop_timeout=40,
    )


def agents_controller(run_dir: Path, *, state_url: str, tracking_uri: str, **settings: str) -> ProcessSpec:
    """The lifecycle controller with CONTROLLER_PLACEMENT=agents, its /metrics on a free port; `settings`: more
    CONTROLLER_* (lower-case keys)."""
    env = {
        "SERVING_RUN_DIR": str(run_dir.resolve()),
        "SERVING_STATE_URL": state_url,
        "MLFLOW_TRACKING_URI": tracking_uri,
        "CONTROLLER_PLACEMENT": "agents",
        "CONTROLLER_METRICS_PORT": str(free_port()),
        **{f"CONTROLLER_{key.upper()}": value for key, value in settings.items()},
    }
    argv = [sys.executable, "-m", "services.controller"]
    return ProcessSpec(name="controller", argv=argv, env=env, stop_timeout=10)


def version_ready(address: str, ports: TritonPorts, model: str, version: str) -> bool:
    """Whether the Triton at `address` serves `version` of `model` now."""
    url = f"http://{address}:{ports.http}/v2/models/{model}/versions/{version}/ready"
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def first_grpc_answer(address: str, ports: TritonPorts, model: str, versions: list[str], timeout: float) -> bool:
    """Poll the gRPC port at `address` (what the gateways' round-robin connects to) until it answers; whether its
    first answer said every one of `versions` of `model` is ready."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        client = grpcclient.InferenceServerClient(f"{address}:{ports.grpc}")  # a new channel: no reconnect backoff
        try:
            return all(client.is_model_ready(model, version, client_timeout=2) for version in versions)
        except InferenceServerException:  # not listening yet
            time.sleep(0.05)
        finally:
            client.close()
    raise AssertionError(f"nothing answered on {address}:{ports.grpc} within {timeout:.0f}s")
