"""A controller over a real deployment state store (embedded SQLite) and the fakes of `fakes.py`, for the controller's
unit tests."""

from __future__ import annotations

import numpy as np

from services.controller import Controller
from services.controller.settings import ControllerSettings
from services.lifecycle import transitions
from services.lifecycle.deployments import EndpointState
from services.lifecycle.routing import effective_weights
from services.lifecycle.store import DeploymentStore
from tests.support.models import UNIT_HIDDEN, unit_model_dir
from tests.unit.controller.fakes import Clock, FakeMetrics, FakeRegistry, FakeTriton


class World:
    """A controller over endpoint `emb`, fed by registered model `m`, and everything it talks to."""

    def __init__(self, tmp_path, max_versions: int = 2):
        self.model_dir = unit_model_dir(tmp_path / "source")
        self.settings = ControllerSettings(run_dir=tmp_path / "run", interval=1.0, drain_seconds=3.0)
        self.registry, self.triton = FakeRegistry(), FakeTriton(UNIT_HIDDEN)
        self.metrics, self.clock = FakeMetrics(), Clock()
        self.forward_answer = np.ones((2, UNIT_HIDDEN), np.float32)
        self.controller = Controller(
            self.settings,
            self.registry,
            self.triton,
            self.metrics,
            clock=self.clock,
            monotonic=self.clock,
            forward=lambda model_dir, manifest: self.forward_answer,
        )
        self.store = DeploymentStore.open(self.settings.state_url)
        self.store.update(lambda s: transitions.set_auto_update(s, "emb", "m", max_versions))

    def register(self, **tags: str) -> str:
        return self.registry.add("m", self.model_dir, tags)

    def tick(self, seconds: float = 0.0) -> EndpointState:
        self.clock.advance(seconds)
        self.controller.tick()
        return self.endpoint()

    def endpoint(self) -> EndpointState:
        return self.store.read().endpoints["emb"]

    def states(self) -> dict[str, str]:
        return {v: r.state for v, r in self.endpoint().versions.items()}

    def serving(self) -> set[str]:
        return {v for m, v in self.triton.loaded if m == "emb"}


def run_traffic(world: World, rate: float, seconds: int, seed: int, fails: float = 0.0, slower: float = 1.0, tick=1):
    """`rate` requests a second for `seconds`, split by the endpoint's shares as the gateways split them, a tick of
    the controller every `tick` seconds: both versions' latencies around 8 ms with a long tail (log-normal, sigma
    0.6), the new version's `slower` times, a share `fails` of its requests 5xx. Stops once the rollout has ended."""
    rng = np.random.default_rng(seed)
    for _ in range(seconds // tick):
        endpoint = world.tick(tick)
        if not endpoint.rollout.running():
            return endpoint
        for version, share in effective_weights(endpoint).items():
            n = rng.poisson(rate * share * tick)
            scale = slower if version == "2" else 1.0
            world.metrics.observe(
                version, scale * rng.lognormal(np.log(0.008), 0.6, n), rng.binomial(n, fails * (version == "2"))
            )
    return world.endpoint()
