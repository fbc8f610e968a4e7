"""The controller's loop: once an interval, for each endpoint, each step in turn (discover, deploy, reconcile, advance
the rollout, prune, unload), as `Controller.steps` declares them for the placement chosen at start. A step that fails on
something outside (registry, Triton, gateway) is retried later with exponential backoff and said in the log (at WARNING
when it starts failing, its retries at INFO); the other steps and endpoints go on. Whether the registry answers is asked
once a tick (`RegistryWatch`): while it does not, discovery waits (nothing new can be found) and every other step goes
on; said once, and once it answers again every step that backed off meanwhile runs at once.

The shared deployment state (`SERVING_STATE_URL`) is read at the start of each tick. Whatever it holds (not JSON,
the wrong schema, a name, version or number that breaks a rule of `services.lifecycle.deployments`), the loop never
dies on it: it says so once per distinct problem at WARNING (naming the fields), keeps the last good state it read,
acts on no endpoint (no step decides from a state it cannot read, no file is touched for it, and nothing overwrites
it), and carries on once it is readable again. A store that cannot be reached is an outside failure like the
others: said, and tried again with exponential backoff, the last good state kept meanwhile. A store that lost its
state (its tables gone, an empty file) or holds an older one than the controller read
(`services.lifecycle.store.rules`) is said once at ERROR with what to do; the controller acts on nothing and writes
nothing until an operator restores the store, whose new epoch makes it newer."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.common.errors import ConfigurationError
from services.controller.deploy import Deployer, Forward, ReplicaDeployer
from services.controller.gateway_metrics import gateway_metrics
from services.controller.rollouts import Rollouts
from services.controller.settings import ControllerSettings, Placement
from services.controller.triton_sync import TritonSync
from services.lifecycle.deployments import Deployments
from services.lifecycle.ports import GatewayMetrics, Registry, TritonControl
from services.lifecycle.registry_watch import RegistryWatch
from services.lifecycle.store import DeploymentStore, StateLost, StateStoreUnavailable

log = logging.getLogger("controller")


@dataclass(frozen=True)
class Step:
    """One thing the loop does for each endpoint every tick, with what it needs besides the state."""

    name: str
    """Its name in the log and in its backoff's key (`<name>:<endpoint>`)."""
    run: Callable[[str], None]
    needs_registry: bool = False
    """It only reads the registry: skipped while the registry does not answer."""


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
        forward: Forward | None = None,
    ):
        """`clock`: the wall-clock time kept in the state (drain and step start); `monotonic`: the backoff's time;
        `forward`: the forward pass a version must pass before it is placed into Triton."""
        self.settings = settings
        self.store = DeploymentStore.open(settings.state_url)
        self.monotonic = monotonic
        local = settings.placement == Placement.LOCAL  # the steps and the deployer, chosen once
        deployer = (Deployer if local else ReplicaDeployer)(settings, self.store, registry, triton, clock, forward)
        sync = TritonSync(settings, self.store, triton, clock)
        rollouts = self.rollouts = Rollouts(self.store, registry, metrics or gateway_metrics(settings), clock)
        self.steps: tuple[Step, ...] = (
            Step("discover", deployer.discover, needs_registry=True),
            Step("deploy_loading", deployer.deploy_loading),
            # with agents, each replica's agent loads every live version before its Triton starts
            *((Step("reconcile", sync.reconcile),) if local else ()),
            Step("advance_rollout", rollouts.advance_rollout),
            Step("prune", sync.prune),
            Step("unload_drained", sync.unload_drained if local else sync.forget_drained),
        )
        self.registry_watch = RegistryWatch(
            registry, log, "the deployed versions keep serving; new registry versions wait", monotonic
        )
        self.backoff: dict[str, float] = {}  # step:endpoint -> monotonic time before which it is not retried
        self.failures: dict[str, int] = {}
        self.last_good: Deployments | None = None
        """The last state read whole: kept while the file is broken or missing."""
        self.state_problem: str | None = None
        """What is wrong with the state now (said once), or None."""
        self.store_failures = 0
        """Reads of the state store that failed in a row (its backoff)."""

    def run(self) -> None:
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
        log.info("controller watching the deployment state in %s", self.store.url)
        while not stop["now"]:
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - a bug in one tick must not end the controller
                log.exception("controller tick failed; carrying on")
            time.sleep(self.settings.interval)
        log.info("controller stopped")

    def tick(self) -> None:
        state = self.read_state()
        if self.registry_watch.check():  # back: the steps that failed on it meanwhile are not left in their backoff
            self.backoff = {key: until for key, until in self.backoff.items() if key == "state"}
        for name in list(state.endpoints) if state else []:
            for step in self.steps:
                if step.needs_registry and not self.registry_watch.up:
                    continue
                self._guarded(f"{step.name}:{name}", step.run, name)

    def read_state(self) -> Deployments | None:
        """The state as it is now, or None while it cannot be used (said once per distinct problem; an unreachable
        store said at each try, tried again with backoff)."""
        if self.monotonic() < self.backoff.get("state", 0):
            return None
        try:
            state = self.store.read()
        except StateLost as exc:
            self._state_lost(exc)
            return None
        except StateStoreUnavailable as exc:
            self._store_unreachable(exc)
            return None
        except ConfigurationError as exc:
            problem = str(exc)
            if problem != self.state_problem:
                kept = len(self.last_good.endpoints) if self.last_good else 0
                log.warning(
                    "%s (%s); keeping the last good state (%d endpoints), acting on none until it is readable again",
                    problem,
                    self.store.url,
                    kept,
                )
                self.state_problem = problem
            return None
        if self.state_problem or self.store_failures:
            log.info("deployment state in %s is readable again; carrying on", self.store.url)
            self.state_problem, self.store_failures = None, 0
            self.backoff.pop("state", None)
        self.last_good = state
        return state

    def _state_lost(self, exc: StateLost) -> None:
        problem = str(exc)
        if problem != self.state_problem:
            kept = len(self.last_good.endpoints) if self.last_good else 0
            log.error("%s; the controller keeps the last good state (%d endpoints) and acts on none", problem, kept)
            self.state_problem = problem

    def _store_unreachable(self, exc: StateStoreUnavailable) -> None:
        self.store_failures += 1
        delay = min(self.settings.max_backoff, self.settings.interval * 2 ** min(self.store_failures, 30))
        self.backoff["state"] = self.monotonic() + delay
        kept = len(self.last_good.endpoints) if self.last_good else 0
        log.warning(
            "%s; keeping the last good state (%d endpoints), acting on none; retrying in %.0fs", exc, kept, delay
        )

    def _guarded(self, key: str, step: Callable[[str], None], name: str) -> None:
        """Run one step; when it fails on something outside (registry, Triton, gateway), retry it later with
        exponential backoff and say so, instead of failing the other steps or exiting."""
        if self.monotonic() < self.backoff.get(key, 0):
            return
        try:
            step(name)
        except Exception as exc:  # noqa: BLE001 - registry, Triton or gateway away: the loop must live on
            failures = self.failures[key] = self.failures.get(key, 0) + 1
            delay = min(
                self.settings.max_backoff, self.settings.interval * 2 ** min(failures, 30)
            )  # 2**1024 overflows a float
            self.backoff[key] = self.monotonic() + delay
            level = logging.WARNING if failures == 1 else logging.INFO  # said once, not at every retry
            log.log(level, "%s failed (%s); retrying in %.0fs", key, exc, delay)
        else:
            if self.failures.pop(key, None):
                log.info("%s works again", key)
            self.backoff.pop(key, None)
