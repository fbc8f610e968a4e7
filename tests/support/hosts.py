"""A scaled-out installation started as separate hosts on one machine: each `Host` is a loopback address (127.0.0.N),
where its processes bind, and a run directory of its own, the only files its processes read or write (versions come
over HTTP from the registry's artifact proxy, state from the shared SQL store, metrics over Prometheus' scrapes).

The specs a host runs: the registry host's MLflow tracking server (`--serve-artifacts`), Prometheus (scraping every
gateway and the controller) and controller (CONTROLLER_PLACEMENT=agents, judging on Prometheus); a Triton host's agent
and its Triton (`tests.support.agents`); a gateway host's gateway, bound to its address and balancing over every
Triton host. Starting is two calls, `Host.start` (at once, so hosts boot side by side) then `Hosts.wait_ready`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from services.launcher import Launcher, ProcessSpec, stop_recorded
from services.prometheus import CONFIG_DIR, prometheus_process
from services.stacks import StackOptions, http_service
from services.triton.server import TritonPorts
from tests.support.agents import agent_host, agents_controller, tracking_server

GATEWAY_APP = "services.gateway.app:create_app()"
FLEET_GATEWAY_ENV = {"SERVING_MONITORING__WORKER_SCORES": "false"}
"""Gateways of a fleet judged by the controller's drift monitor: their workers judge nothing themselves."""


class Host:
    """One address and one run directory; the processes started there (their pid files and logs in that directory)."""

    def __init__(self, name: str, address: str, run_dir: Path):
        self.name, self.address, self.run_dir = name, address, run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.launcher = Launcher(run_dir)
        self.pending: list[tuple[ProcessSpec, subprocess.Popen]] = []

    def start(self, spec: ProcessSpec) -> subprocess.Popen:
        """Start `spec` here without waiting (`Hosts.wait_ready` waits for every host's)."""
        proc = self.launcher.start(spec, detach=True)
        self.pending.append((spec, proc))
        return proc

    def wait_ready(self, timeout: float) -> None:
        while self.pending:
            self.launcher.wait_ready(*self.pending.pop(0), timeout)

    def pid(self, name: str) -> int:
        """The pid of process `name` as its pid file says (one the host's own processes started, such as an agent's
        Triton, too)."""
        return int((self.run_dir / f"{name}.pid").read_text())

    def log(self, name: str) -> Path:
        """The log file of process `name` (one the host's own processes started, such as an agent's Triton, too)."""
        return self.launcher.log_path(name)

    def kill(self, name: str) -> None:
        """SIGKILL the process group of `name` (a host that goes away at once) and reap it."""
        for spec, proc in self.launcher.procs:
            if spec.name == name:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def logs(self, chars: int = 1500) -> str:
        return "".join(
            f"\n--- {self.name} {path.name}\n{path.read_text(errors='replace')[-chars:]}"
            for path in sorted(self.run_dir.glob("logs/*.log"))
        )

    def stop(self) -> None:
        self.launcher.stop_all()
        stop_recorded(self.run_dir, timeout=10)  # what its processes started, should one have died first


class Hosts:
    """The hosts of one installation, each under `base/<name>`."""

    def __init__(self, base: Path):
        self.base = base
        self.all: dict[str, Host] = {}

    def add(self, name: str, address: str) -> Host:
        self.all[name] = Host(name, address, self.base / name)
        return self.all[name]

    def wait_ready(self, timeout: float = 120) -> None:
        for host in self.all.values():
            host.wait_ready(timeout)

    def wait_for(self, what: str, check, timeout: float = 60.0, interval: float = 0.2):
        """Poll `check` until it returns something true (returned); else fail with every host's log tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(interval)
        raise AssertionError(f"{what} did not happen within {timeout:.0f}s{self.logs()}")

    def logs(self) -> str:
        return "".join(host.logs() for host in self.all.values())

    def stop(self) -> None:
        """Every host at once (an agent stops its own Triton)."""
        if self.all:
            with ThreadPoolExecutor(len(self.all)) as pool:
                list(pool.map(Host.stop, self.all.values()))


# --- the registry host: MLflow, Prometheus, the controller --------------------------------------------------------
def mlflow_spec(host: Host, port: int) -> ProcessSpec:
    return tracking_server(host.run_dir, host.address, port)


def prometheus_config(serving: list[str], controller: list[str], scrape: float) -> dict:
    """The project's Prometheus configuration (observability/prometheus/prometheus.yml) scraping every `scrape` seconds
    the gateways (`serving` job) and the controllers' /metrics (`controller` job) at the given host:port; other jobs
    left out."""
    loaded = yaml.safe_load((CONFIG_DIR / "prometheus.yml").read_text())
    loaded["global"] = {"scrape_interval": f"{scrape:g}s", "evaluation_interval": f"{scrape:g}s"}
    jobs = {job["job_name"]: job for job in loaded["scrape_configs"]}
    targets = {"serving": serving, "controller": controller}
    assert set(targets) <= set(jobs), "the project's configuration scrapes the gateways and the controller"
    loaded["scrape_configs"] = [jobs[name] | {"static_configs": [{"targets": t}]} for name, t in targets.items()]
    return loaded


def prometheus_rules(wait: str = "2s") -> str:
    """The project's alert rules (observability/prometheus/rules.yml), the drift alert waiting `wait`, not 5 minutes."""
    rules = (CONFIG_DIR / "rules.yml").read_text()
    assert "for: 5m" in rules
    return rules.replace("for: 5m", f"for: {wait}")


def prometheus_spec(
    host: Host, port: int, *, serving: list[str], controller: list[str], scrape: float, rules: str | None = None
) -> ProcessSpec:
    """Prometheus at the host's address with `prometheus_config`, its configuration, rules (the project's, or `rules`)
    and database in the host's directory."""
    (host.run_dir / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(serving, controller, scrape)))
    (host.run_dir / "rules.yml").write_text(rules or (CONFIG_DIR / "rules.yml").read_text())
    return prometheus_process(host.run_dir / "prometheus.yml", host.run_dir / "prometheus-data", port, host.address)


def controller_spec(
    host: Host, *, state_url: str, tracking_uri: str, prometheus_url: str, metrics_port: int, **settings: str
) -> ProcessSpec:
    """The controller placing through the agents, judging rollouts and drift from Prometheus, its /metrics at the
    host's address; `settings`: more CONTROLLER_* (lower-case keys, `drift__interval` for nested ones)."""
    fleet = {"prometheus_url": prometheus_url, "metrics_host": host.address, "metrics_port": str(metrics_port)}
    return agents_controller(host.run_dir, state_url=state_url, tracking_uri=tracking_uri, **fleet, **settings)


# --- Triton hosts and gateway hosts -------------------------------------------------------------------------------
def triton_spec(
    host: Host, ports: TritonPorts, *, state_url: str, tracking_uri: str, env: dict[str, str] | None = None
) -> ProcessSpec:
    """`serving triton-agent` at the host's address: its Triton opens its ports holding every live version."""
    return agent_host(host.run_dir, host.address, ports, state_url=state_url, tracking_uri=tracking_uri, env=env)


def gateway_spec(
    host: Host,
    port: int,
    *,
    tritons: list[str],
    state_url: str,
    tracking_uri: str,
    workers: int = 1,
    env: dict[str, str] | None = None,
) -> ProcessSpec:
    """The gateway at the host's address: no built-in model, the deployed endpoints of the shared state, every Triton
    host (`tritons`: their gRPC host:port) balanced, versions' files fetched from the registry into its own
    directory, its workers polling the state at the default interval (1 s)."""
    options = StackOptions(
        host=host.address,
        port=port,
        workers=workers,
        model_dir=host.run_dir / "no-built-in-model",
        run_dir=host.run_dir,
    )
    settings = {
        "GATEWAY_TRITON_GRPC_URL": ",".join(tritons),
        "SERVING_STATE_URL": state_url,
        "MLFLOW_TRACKING_URI": tracking_uri,
        "GATEWAY_VERSIONS_DIR": str((host.run_dir / "versions").resolve()),
        "GATEWAY_VERSIONS_FROM_REGISTRY": "true",
        "GATEWAY_GRPC_PORT": "0",  # HTTP only: every simulated host's gateway would share 8081 (SO_REUSEPORT)
        **FLEET_GATEWAY_ENV,
        **(env or {}),
    }
    spec = http_service(options, name="gateway", app=GATEWAY_APP, extra_env=settings)
    spec.stop_timeout = 15
    return spec
