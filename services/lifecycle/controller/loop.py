"""The controller's loop: once an interval, for each endpoint, each step in turn (discover, deploy, reconcile,
advance the rollout, prune, unload). A step that fails on something outside (registry, Triton, gateway) is retried
later with exponential backoff and said in the log; the other steps and endpoints go on."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

from services.lifecycle.controller.deploy import Deployer, Forward, onnx_forward
from services.lifecycle.controller.rollouts import HttpGatewayMetrics, Rollouts
from services.lifecycle.controller.triton_sync import TritonSync
from services.lifecycle.ports import GatewayMetrics, Registry, TritonControl
from services.lifecycle.settings import ControllerSettings
from services.lifecycle.state import DeploymentStore

log = logging.getLogger("controller")


class Controller:
    def __init__(
        self,
        settings: ControllerSettings,
        registry: Registry,
        triton: TritonControl,
        metrics: GatewayMetrics | None = None,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        forward: Forward = onnx_forward,
    ):
        """`clock`: the wall-clock time kept in the state (drain and step start); `monotonic`: the backoff's time;
        `forward`: the forward pass a version must pass before it is placed into Triton."""
        self.settings = settings
        self.store = DeploymentStore(settings.deployments_file)
        self.monotonic = monotonic
        deployer = Deployer(settings, self.store, registry, triton, clock, forward)
        sync = TritonSync(settings, self.store, triton, clock)
        rollouts = Rollouts(self.store, registry, metrics or HttpGatewayMetrics(settings.gateway_url), clock)
        self.steps = (
            deployer.discover,
            deployer.deploy_loading,
            sync.reconcile,
            rollouts.advance_rollout,
            sync.prune,
            sync.unload_drained,
        )
        self.backoff: dict[str, float] = {}  # step:endpoint -> monotonic time before which it is not retried
        self.failures: dict[str, int] = {}

    def run(self) -> None:
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
        log.info("controller watching %s", self.settings.deployments_file)
        while not stop["now"]:
            self.tick()
            time.sleep(self.settings.interval)
        log.info("controller stopped")

    def tick(self) -> None:
        for name in list(self.store.read().endpoints):
            for step in self.steps:
                self._guarded(f"{step.__name__}:{name}", step, name)

    def _guarded(self, key: str, step: Callable[[str], None], name: str) -> None:
        """Run one step; when it fails on something outside (registry, Triton, gateway), retry it later with
        exponential backoff and say so, instead of failing the other steps or exiting."""
        if self.monotonic() < self.backoff.get(key, 0):
            return
        try:
            step(name)
        except Exception as exc:  # noqa: BLE001 - registry, Triton or gateway away: the loop must live on
            failures = self.failures[key] = self.failures.get(key, 0) + 1
            delay = min(self.settings.max_backoff, self.settings.interval * 2**failures)
            self.backoff[key] = self.monotonic() + delay
            log.warning("%s failed (%s); retrying in %.0fs", key, exc, delay)
        else:
            if self.failures.pop(key, None):
                log.info("%s works again", key)
            self.backoff.pop(key, None)
