"""Versions placed by the agents beside each Triton replica (CONTROLLER_PLACEMENT=agents), with real parts on separate
hosts: MLflow's tracking server on 127.0.0.4 serving the artifacts over HTTP, two Triton replicas on 127.0.0.2 and
127.0.0.3 each with its agent and its own run directory, the controller in a directory of its own, and the shared
deployment state in PostgreSQL on 127.0.0.5 (the session's server). A third replica joins later.

In order: a version goes live only once both replicas hold it; the next one replaces it on both (the old one leaves
both Tritons), and a gateway elsewhere fetches its tokenizer and manifest over HTTP; a Triton killed with SIGKILL is
started again by its agent and opens its ports already holding the live version; so does a joining replica's
Triton."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from services.common.contract import MANIFEST_FILE, TOKENIZER_FILE, Manifest
from services.gateway.version_files import version_files
from services.launcher import free_port
from services.lifecycle import transitions
from services.lifecycle.store import DeploymentStore
from services.registry.mlflow_registry import ModelRegistry
from services.registry.settings import RegistrySettings
from services.triton.server import TritonPorts
from tests.support.agents import agents_controller, first_grpc_answer, version_ready
from tests.support.hosts import Host, Hosts, mlflow_spec, triton_spec

REGISTRY, A, B, JOINER = "127.0.0.4", "127.0.0.2", "127.0.0.3", "127.0.0.6"
TTL = 30.0
"""CONTROLLER_REPLICA_TTL here: longer than replica A takes to load a version while B's agent is stopped."""


class Fleet:
    def __init__(self, base: Path, state_url: str):
        self.base, self.hosts = base, Hosts(base)
        ports = set()
        while len(ports) < 4:
            ports.add(free_port())
        *triton, port = sorted(ports)
        self.ports = TritonPorts(*triton)  # the same on every replica, as in a Kubernetes Deployment
        self.tracking_uri = f"http://{REGISTRY}:{port}"
        self.state_url = state_url
        self.store = DeploymentStore.open(self.state_url)
        self.store.update(lambda s: transitions.set_auto_update(s, "emb", "tiny-emb", 1))
        registry = self.hosts.add("registry-host", REGISTRY)
        registry.start(mlflow_spec(registry, port))
        for address in (A, B):  # the hosts start at once
            self.start_agent(address)
        self.hosts.wait_ready(120)
        self.registry = ModelRegistry(RegistrySettings(tracking_uri=self.tracking_uri, run_dir=base / "client"))
        controller = self.hosts.add("controller-host", "127.0.0.1")
        settings = {"interval": "0.5", "replica_ttl": str(TTL), "drain_seconds": "1"}
        controller.start(agents_controller(controller.run_dir, **self.urls, **settings))

    @property
    def urls(self) -> dict[str, str]:
        return {"state_url": self.state_url, "tracking_uri": self.tracking_uri}

    def start_agent(self, address: str) -> Host:
        host = self.hosts.add(f"triton-host-{address}", address)
        host.start(triton_spec(host, self.ports, **self.urls))
        return host

    def run_dir(self, address: str) -> Path:
        return self.hosts.all[f"triton-host-{address}"].run_dir

    def agent_pid(self, address: str) -> int:
        return self.hosts.all[f"triton-host-{address}"].pid("triton-agent")

    def publish(self, model_dir: Path) -> str:
        return self.registry.publish(model_dir, "tiny-emb")["version"]

    def state(self, version: str) -> str | None:
        record = self.store.read().endpoints["emb"].versions.get(version)
        return record.state if record else None

    def held_by(self, version: str) -> set[str]:
        """The replicas that reported `version` ready lately."""
        return {r for r, held in self.store.replicas(time.time(), TTL).items() if version in held.get("emb", [])}

    def serving(self, version: str, *addresses: str) -> bool:
        return all(version_ready(address, self.ports, "emb", version) for address in addresses)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, postgres):
    fleet = Fleet(tmp_path_factory.mktemp("agents"), postgres.create_database("replica_agents"))
    yield fleet
    fleet.hosts.stop()


def test_a_version_goes_live_only_once_every_replica_holds_it(fleet, tiny_model):
    b = f"{B}:{fleet.ports.grpc}"
    fleet.hosts.wait_for("replica B's agent reporting", lambda: b in fleet.store.replicas(time.time(), 0.7), 20)
    os.kill(fleet.agent_pid(B), signal.SIGSTOP)  # B's agent stalls: its last report stays fresh (TTL)
    try:
        started = time.monotonic()
        version = fleet.publish(tiny_model)
        fleet.hosts.wait_for(
            "replica A holding the version", lambda: fleet.held_by(version) == {f"{A}:{fleet.ports.grpc}"}, 60
        )
        held_by_a = time.monotonic() - started
        time.sleep(1.5)  # three controller ticks
        assert fleet.state(version) == "loading" and not fleet.serving(version, B)
    finally:
        os.kill(fleet.agent_pid(B), signal.SIGCONT)
    resumed = time.monotonic()
    fleet.hosts.wait_for("the version live", lambda: fleet.state(version) == "live", 60)
    assert fleet.serving(version, A, B) and len(fleet.held_by(version)) == 2
    print(
        f"\nversion {version}: on replica A {held_by_a:.1f}s after registration; "
        f"live {time.monotonic() - resumed:.1f}s after replica B's agent resumed"
    )


def test_a_gateway_on_another_host_fetches_the_tokenizer_and_manifest_over_http(fleet):
    version = fleet.store.read().endpoints["emb"].live()[0]
    record = fleet.store.read().endpoints["emb"].versions[version]
    elsewhere = record.model_copy(update={"model_dir": "/on/the/controllers/host"})  # not readable on a gateway host
    files = version_files("emb", elsewhere, fleet.base / "gateway-host" / "versions", registry=fleet.registry)
    assert files.is_relative_to(fleet.base / "gateway-host")
    assert sorted(p.name for p in files.iterdir()) == [MANIFEST_FILE, TOKENIZER_FILE]
    assert Manifest.load(files).files == Manifest.load(record.model_dir).files


def test_a_joining_replica_holds_the_live_versions_before_its_triton_is_ready(fleet):
    live = fleet.store.read().endpoints["emb"].live()
    started = time.monotonic()
    joiner = fleet.start_agent(JOINER)
    assert live and first_grpc_answer(JOINER, fleet.ports, "emb", live, 120)  # its port opened holding them
    ready_after = time.monotonic() - started
    joiner.wait_ready(10)
    fleet.hosts.wait_for("the joiner's report", lambda: f"{JOINER}:{fleet.ports.grpc}" in fleet.held_by(live[0]), 20)
    print(f"\njoining replica: Triton ready with live versions {live} {ready_after:.1f}s after its agent started")
