"""Registry-deployed endpoints that follow the shared deployment state (`services.lifecycle.state`). Each worker asks
the store for its revision (one small query) every poll interval; when it moved, it reads the state, builds the new
set off the event loop and swaps it in with one assignment: requests in flight finish on the old set, none waits.

While the store cannot be reached the last set keeps serving: `/health/ready` says `"state_store": "unreachable:
<why>"` (still 200, since serving goes on) and `serving_state_store_up` is 0; the first poll that reaches the store
again says so and catches up with whatever changed meanwhile.

A store that lost its state (its tables gone, its file emptied or replaced) or holds an older state than the worker
applied is not applied either (`services.lifecycle.state_rules`): the last set keeps serving, `/health/ready` says
`"state_store": "lost: <what happened>; <what to do>"`, `serving_state_store_regressed` is 1 and the log says it at
ERROR. A worker that starts against such a store serves the last good state this host read
(`DeploymentStore.remembered`). Once an operator restored the store, its new epoch makes it newer, and it is followed
again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from observability import metrics
from services.common.backend import ModelEndpoint, PipelineEndpoint
from services.common.errors import ConfigurationError
from services.gateway.watcher import EmptyEndpoints, EndpointSet, redact_paths
from services.lifecycle.state import Deployments, DeploymentStore, Stamp, StateLost, StateStoreUnavailable
from services.monitoring.statistics import EndpointMetrics

log = logging.getLogger(__name__)
NAME = "deployment state"
"""Its key in `/health/ready`'s config_errors and its `file` label in `serving_config_errors`."""


@dataclass
class Poll:
    """What one look at the store found (taken off the event loop, applied on it)."""

    stamp: Stamp | None = None
    loaded: EndpointSet | None = None
    error: str | None = None
    """The state of `stamp` could not be served (invalid, a version whose files do not load)."""
    outage: str | None = None
    """The store could not be reached: why."""
    lost: str | None = None
    """The store lost its state or holds an older one: what happened and what to do."""


class StoreWatcher:
    """An endpoint resolver over the deployment store: serves the set `build` made of the last state it read."""

    def __init__(self, store: DeploymentStore, build: Callable[[Deployments], EndpointSet], interval: float):
        self.store = store
        self.build = build
        self.interval = interval
        self.current: EndpointSet = EmptyEndpoints()
        self.stamp: Stamp | None = None
        """Where the state of the served set (or of the error) stands; None: nothing read yet."""
        self.error: str | None = None
        self.outage: str | None = None
        self.lost: str | None = None
        self._task: asyncio.Task | None = None
        self._up = metrics.STATE_STORE_UP.labels(store.backend)
        self._regressed = metrics.STATE_STORE_REGRESSED.labels(store.backend)
        self._apply(self.poll())

    @property
    def revision(self) -> int | None:
        return self.stamp.revision if self.stamp is not None else None

    def resolve(self, name: str) -> ModelEndpoint | PipelineEndpoint | None:
        return self.current.get(name)

    def names(self) -> list[str]:
        return self.current.names()

    def declared(self, name: str) -> EndpointMetrics | None:
        return self.current.metrics.get(name)

    def errors(self) -> dict[str, str]:
        errors = dict(self.current.errors)
        if self.error:
            errors[NAME] = redact_paths(self.error, Path("/")) + " (still serving the previous one)"
        return errors

    def health(self) -> dict[str, str]:
        if self.outage:
            return {"state_store": f"unreachable: {self.outage}"}
        return {"state_store": f"lost: {self.lost}" if self.lost else "ok"}

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        await asyncio.to_thread(self.current.unload)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    async def check(self) -> bool:
        """Look at the store once; True when a new set was swapped in."""
        return self._apply(await asyncio.to_thread(self.poll))

    def poll(self) -> Poll:
        """The store's stamp; when it moved since the served set, the state read and built (blocking calls)."""
        stamp = None
        try:
            stamp = self.store.stamp()
            if stamp == self.stamp:
                return Poll(stamp)
            state = self.store.read()
        except StateLost as exc:
            return self._lost(exc.reason)
        except StateStoreUnavailable as exc:
            return Poll(outage=exc.reason)
        except ConfigurationError as exc:
            return Poll(stamp, error=exc.message)
        return self._built(stamp, state)

    def _built(self, stamp: Stamp, state: Deployments, lost: str | None = None) -> Poll:
        try:
            return Poll(stamp, loaded=self.build(state), lost=lost)
        except Exception as exc:  # noqa: BLE001 - keep serving the last good state; report this one
            return Poll(stamp, error=str(exc), lost=lost)

    def _lost(self, reason: str) -> Poll:
        """Nothing applied from the store; a worker that serves nothing yet builds the last good state of its host."""
        remembered = self.store.remembered() if self.stamp is None else None
        if remembered is None:
            return Poll(lost=reason)
        return self._built(*remembered, lost=reason)

    def _apply(self, found: Poll) -> bool:
        if found.outage is not None:
            if self.outage is None:
                log.error(
                    "deployment state store %s unreachable, serving revision %s: %s",
                    self.store.url,
                    self.revision,
                    found.outage,
                )
            self.outage = found.outage
            self._up.set(0)
            return False
        if self.outage is not None:
            log.info("deployment state store %s reachable again", self.store.url)
        self.outage = None
        self._up.set(1)
        self._follow_lost(found)
        if found.loaded is not None:
            self.current, self.error = found.loaded, None
            source = "this host's last good copy of " if found.lost else ""
            log.info("deployment state %s%s applied", source, found.stamp)
        elif found.error is not None:
            self.error = found.error
            log.error("deployment state %s not applied, still serving the last one: %s", found.stamp, found.error)
        self.stamp = found.stamp if found.stamp is not None else self.stamp
        metrics.CONFIG_ERRORS.labels(NAME).set(len(self.errors()))
        return found.loaded is not None

    def _follow_lost(self, found: Poll) -> None:
        lost = found.lost
        if lost is not None and lost != self.lost:
            serving = (found.stamp if found.loaded is not None else self.stamp) or "nothing"
            log.error("deployment state store %s lost its state, serving %s: %s", self.store.url, serving, lost)
        elif lost is None and self.lost is not None:
            log.warning("deployment state store %s holds a state again; following it", self.store.url)
        self.lost = lost
        self._regressed.set(1 if lost else 0)
