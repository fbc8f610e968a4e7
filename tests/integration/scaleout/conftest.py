"""One fleet for every module here (`tests.support.hosts`): two Triton hosts, two gateway hosts (two workers and one),
one registry host (MLflow's tracking server proxying the artifacts, Prometheus scraping every second, the controller),
and the deployment state in the session's PostgreSQL. Endpoint `emb` follows registered model `tiny-emb` (two versions
kept); the fleet starts serving its version 1."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.launcher import free_port
from services.lifecycle import transitions
from services.lifecycle.store import DeploymentStore
from services.prometheus_api import PrometheusApi
from services.registry.mlflow_registry import ModelRegistry
from services.registry.settings import RegistrySettings
from services.triton.server import TritonPorts
from tests.support.agents import version_ready
from tests.support.hosts import (
    Hosts,
    controller_spec,
    gateway_spec,
    mlflow_spec,
    prometheus_rules,
    prometheus_spec,
    triton_spec,
)

ENDPOINT, REGISTERED = "emb", "tiny-emb"
REGISTRY, TRITONS, GATEWAYS = "127.0.0.4", ("127.0.0.2", "127.0.0.3"), ("127.0.0.6", "127.0.0.7")
WORKERS_PER_GATEWAY = (2, 1)
SCRAPE = 1.0
TOKEN = "scale-out-admin-token"
CONTROLLER = {
    "interval": "0.5",
    "drain_seconds": "1",
    "drift__reference_size": "200",  # the one-worker figures of tests/integration/monitoring/test_fleet.py
    "drift__window_size": "200",
    "drift__min_samples": "100",
    "drift__interval": "0.5",
}
SUPERVISE = {
    "SUPERVISE_PROBE_PERIOD": "1",
    "SUPERVISE_PROBE_TIMEOUT": "3",
    "SUPERVISE_PROBE_FAILURES": "2",
    "SUPERVISE_STOP_GRACE": "1",
}
"""The agents' supervisors of their Tritons: a wedged server restarted within about 10 s, not half a minute."""


class Fleet:
    def __init__(self, base: Path, state_url: str):
        self.hosts, self.state_url = Hosts(base), state_url
        ports = set()
        while len(ports) < 7:
            ports.add(free_port())
        http, grpc, metrics, self.gateway_port, self.mlflow_port, self.prometheus_port, self.metrics_port = sorted(
            ports
        )
        self.ports = TritonPorts(http, grpc, metrics)  # the same on every Triton host, as in a Deployment
        self.tracking_uri = f"http://{REGISTRY}:{self.mlflow_port}"
        self.prometheus = PrometheusApi(f"http://{REGISTRY}:{self.prometheus_port}")
        self.gateway_urls = [f"http://{address}:{self.gateway_port}" for address in GATEWAYS]
        self.store = DeploymentStore.open(state_url)
        self.registry = ModelRegistry(RegistrySettings(tracking_uri=self.tracking_uri, run_dir=base / "developer"))
        self.tritons = [self.hosts.add(f"triton-host-{i}", address) for i, address in enumerate(TRITONS)]
        self.gateways = [self.hosts.add(f"gateway-host-{i}", address) for i, address in enumerate(GATEWAYS)]
        self.registry_host = self.hosts.add("registry-host", REGISTRY)

    def start(self) -> None:
        """Every host at once; the controller once MLflow answers (it would back off otherwise)."""
        self.store.update(lambda s: transitions.set_auto_update(s, ENDPOINT, REGISTERED, 2))
        urls = {"state_url": self.state_url, "tracking_uri": self.tracking_uri}
        registry = self.registry_host
        self.start_registry(wait=False)
        scraped = {
            "serving": [url.removeprefix("http://") for url in self.gateway_urls],
            "controller": [f"{REGISTRY}:{self.metrics_port}"],
        }
        rules = prometheus_rules()  # the drift alert after 2 s
        registry.start(prometheus_spec(registry, self.prometheus_port, **scraped, scrape=SCRAPE, rules=rules))
        for host in self.tritons:
            host.start(triton_spec(host, self.ports, **urls, env=SUPERVISE))
        tritons = [f"{address}:{self.ports.grpc}" for address in TRITONS]
        for host, workers in zip(self.gateways, WORKERS_PER_GATEWAY, strict=True):
            env = {"GATEWAY_ADMIN_TOKEN": TOKEN}
            host.start(gateway_spec(host, self.gateway_port, tritons=tritons, workers=workers, env=env, **urls))
        self.hosts.wait_ready(120)
        fleet = {"prometheus_url": self.prometheus.url, "metrics_port": self.metrics_port}
        registry.start(controller_spec(registry, **fleet, **urls, **CONTROLLER))

    def start_registry(self, wait: bool = True) -> None:
        """MLflow's tracking server on the registry host (its store and artifacts kept from an earlier run)."""
        self.registry_host.start(mlflow_spec(self.registry_host, self.mlflow_port))
        if wait:
            self.registry_host.wait_ready(60)

    def controller_metric(self, name: str) -> float | None:
        """A sample of the controller's /metrics (None: not there, or the controller does not answer)."""
        try:
            text = httpx.get(f"http://{REGISTRY}:{self.metrics_port}/metrics", timeout=5).text
        except httpx.HTTPError:
            return None
        found = [line.split()[-1] for line in text.splitlines() if line.split(" ")[0] == name]
        return float(found[0]) if found else None

    # --- the shared state and the replicas ------------------------------------------------------------------------
    def publish(self, model_dir: Path) -> str:
        return self.registry.publish(model_dir, REGISTERED)["version"]

    def state(self, version: str) -> str | None:
        record = self.store.read().endpoints[ENDPOINT].versions.get(version)
        return record.state if record else None

    def live(self) -> list[str]:
        return sorted(self.store.read().endpoints[ENDPOINT].live(), key=int)

    def wait_state(self, version: str, state: str, timeout: float = 90) -> None:
        self.hosts.wait_for(f"version {version} {state}", lambda: self.state(version) == state, timeout)

    def rollout_under_way(self):
        """The endpoint's rollout once its first step has started."""
        return self.hosts.wait_for(
            "the rollout's first step under way",
            lambda: (r := self.store.read().endpoints[ENDPOINT].rollout) and r.step_started and r,
            20,
            interval=0.1,
        )

    def held_by(self, version: str) -> set[str]:
        """The Triton hosts whose agents report `version` ready (reported within the controller's TTL)."""
        replicas = self.store.replicas(time.time(), 10.0)
        return {replica for replica, held in replicas.items() if version in held.get(ENDPOINT, [])}

    def ready_on(self, version: str) -> list[bool]:
        """Whether each Triton host's server has `version` loaded and ready now."""
        return [version_ready(host.address, self.ports, ENDPOINT, version) for host in self.tritons]

    def placed_on(self, host) -> list[str]:
        """The versions in a Triton host's own repository."""
        repository = host.run_dir / "triton-repository" / ENDPOINT
        return sorted((p.name for p in repository.iterdir() if p.is_dir()), key=int) if repository.is_dir() else []

    def triton_calls(self, host, version: str | None = None) -> float:
        """Inference calls that the Triton host's server answered for the endpoint (one version, or all). Summed over
        every version, a count falls when a version is unloaded (its series goes): a difference over time wants one."""
        try:
            text = httpx.get(f"http://{host.address}:{self.ports.metrics}/metrics", timeout=5).text
        except httpx.HTTPError:
            return 0.0
        prefix = f'nv_inference_request_success{{model="{ENDPOINT}",version="' + (f'{version}"' if version else "")
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))

    # --- the gateways ---------------------------------------------------------------------------------------------
    def admin(self, method: str, path: str, body: dict | None = None, gateway: int = 0) -> dict:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        url = f"{self.gateway_urls[gateway]}/admin{path}"
        answer = httpx.request(method, url, json=body, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def answered_by(self, gateway: int, count: int = 20) -> list[str | None]:
        """The versions that answer `count` requests to one gateway host, each on a new connection (any worker)."""
        url = f"{self.gateway_urls[gateway]}/serve/{ENDPOINT}"
        answers = [httpx.post(url, json={"text": "hello world"}, timeout=30) for _ in range(count)]
        return [a.headers.get("x-model-version") if a.status_code == 200 else None for a in answers]


@pytest.fixture(scope="package")
def fleet(tmp_path_factory, postgres, tiny_model) -> Iterator[Fleet]:
    started = time.monotonic()
    fleet = Fleet(tmp_path_factory.mktemp("scaleout"), postgres.create_database("scaleout"))
    try:
        fleet.start()
        up = time.monotonic() - started
        first = fleet.publish(tiny_model)
        fleet.wait_state(first, "live")
        for gateway in range(len(GATEWAYS)):
            fleet.hosts.wait_for(
                f"gateway {gateway} serving version {first}", lambda g=gateway: fleet.answered_by(g, 4) == [first] * 4
            )
        print(f"\nfleet up in {up:.1f}s, serving version {first} {time.monotonic() - started:.1f}s after the start")
        yield fleet
    finally:
        fleet.hosts.stop()
