"""A replica agent over a real deployment state store (SQLite in the test's directory) and the real repository
handling of `TritonModels` (config rendering, version directories, links to the fetched files), with only Triton's
HTTP API played in memory (`ServerInMemory`) and the lifecycle's fake registry (model directories copied from disk):
what the agent's unit tests drive."""

from __future__ import annotations

import numpy as np

from services.common.contract import checked_hashes
from services.common.errors import ConfigurationError, Unavailable
from services.lifecycle import transitions
from services.lifecycle.deployments import Phase, VersionState
from services.lifecycle.store import DeploymentStore
from services.replica.agent import ReplicaAgent
from services.triton.model_control import TritonModels
from tests.support.models import UNIT_HIDDEN, unit_model_dir
from tests.unit.controller.fakes import Clock, FakeRegistry

REPLICA = "127.0.0.2:8001"


class ServerInMemory(TritonModels):
    """`TritonModels` with its files for real and Triton's HTTP API in memory: a load serves the version directories
    placed at that moment, as Triton's explicit model control does."""

    def __init__(self, repository):
        super().__init__(repository, "http://127.0.0.1:1", control_key="unit")
        self.up, self.loaded, self.loads = True, set(), 0
        self.refuse: set[str] = set()
        """Versions whose load Triton refuses (the whole model's load fails while one is placed)."""
        self.answer: np.ndarray | None = None
        self.infers = 0

    def load(self, model):
        if not self.up:
            raise Unavailable(f"Triton did not answer the load of '{model}'")
        self.loads += 1
        placed = set(self.placed_versions().get(model, []))
        if placed & self.refuse:
            raise ConfigurationError(f"Triton refused to load '{model}': version {sorted(placed & self.refuse)}")
        self.loaded = {k for k in self.loaded if k[0] != model} | {(model, v) for v in placed}

    def server_live(self):
        return self.up

    def ready_versions(self):
        ready = {}
        for model, version in sorted(self.loaded):
            ready.setdefault(model, []).append(version)
        return ready

    def ready(self, model, version):
        return self.up and (model, version) in self.loaded

    def infer(self, model, version, model_dir, texts):
        self.infers += 1
        if (model, version) not in self.loaded:
            raise ConfigurationError(f"version {version} of '{model}' is not loaded")
        return self.answer if self.answer is not None else np.ones((len(texts), UNIT_HIDDEN), np.float32)

    def restart(self):
        """Triton started again: it holds nothing until the agent's next start placed and loaded everything."""
        self.loaded.clear()


class Replica:
    """One agent over a real store, its own repository and models directory, the fake registry."""

    def __init__(self, tmp_path):
        self.store = DeploymentStore.open(f"sqlite:///{tmp_path / 'state.db'}")
        self.registry, self.clock = FakeRegistry(), Clock()
        self.model_dir = unit_model_dir(tmp_path / "source")
        self.triton = ServerInMemory(tmp_path / "repository")
        self.models_dir = tmp_path / "models"
        self.agent = ReplicaAgent(
            self.store, self.registry, self.triton, replica=REPLICA, models_dir=self.models_dir, clock=self.clock
        )
        self.store.update(lambda s: transitions.set_auto_update(s, "emb", "m", 3))
        self.fetches = 0
        fetch = self.registry.fetch

        def counted(name, version, dest):
            self.fetches += 1
            return fetch(name, version, dest)

        self.registry.fetch = counted

    def version(self, state: str, *, verified: bool = False, drain_started: float | None = None) -> str:
        """A new registry version, in the state as `state`."""
        version = self.registry.add("m", self.model_dir)
        checked = {"registry": {"name": "m", "version": version}, "artifacts": checked_hashes(self.model_dir)}
        lineage = checked if verified or state != "loading" else {}
        record = VersionState(version=version, state=state, lineage=lineage, drain_started=drain_started)
        self.store.update(lambda s: s.endpoints["emb"].versions.__setitem__(version, record))
        return version

    def set_state(self, version: str, state: str, drain_started: float | None = None) -> None:
        def change(s):
            s.endpoints["emb"].versions[version].state = Phase(state)
            s.endpoints["emb"].versions[version].drain_started = drain_started

        self.store.update(change)

    def forget(self, version: str) -> None:
        self.store.update(lambda s: s.endpoints["emb"].versions.pop(version))

    def reported(self) -> dict[str, list[str]] | None:
        return self.store.replicas(self.clock(), 10.0).get(REPLICA)

    def placed(self) -> list[str]:
        return self.triton.placed_versions().get("emb", [])

    def tick(self, seconds: float = 1.0):
        self.clock.advance(seconds)
        self.agent.tick()
        return self.reported()
