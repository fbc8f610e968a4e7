"""Registry-deployed endpoints that follow the shared deployment state (`services.lifecycle.state`). Each worker asks
the store for its revision (one small query) every poll interval; when it moved, it reads the state, builds the new
set off the event loop and swaps it in with one assignment: requests in flight finish on the old set, none waits.

While the store cannot be reached the last set keeps serving: `/health/ready` says `"state_store": "unreachable:
<why>"` (still 200, since serving goes on) and `serving_state_store_up` is 0; the first poll that reaches the store
again says so and catches up with whatever changed meanwhile."""

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
from services.lifecycle.state import Deployments, DeploymentStore, StateStoreUnavailable
from services.monitoring.statistics import EndpointMetrics

log = logging.getLogger(__name__)
NAME = "deployment state"
"""Its key in `/health/ready`'s config_errors and its `file` label in `serving_config_errors`."""


@dataclass
class Poll:
    """What one look at the store found (taken off the event loop, applied on it)."""

    revision: int | None = None
    loaded: EndpointSet | None = None
    error: str | None = None
    """The state of `revision` could not be served (invalid, a version whose files do not load)."""
    outage: str | None = None
    """The store could not be reached: why."""


class StoreWatcher:
    """An endpoint resolver over the deployment store: serves the set `build` made of the last state it read."""

    def __init__(self, store: DeploymentStore, build: Callable[[Deployments], EndpointSet], interval: float):
        self.store = store
        self.build = build
        self.interval = interval
        self.current: EndpointSet = EmptyEndpoints()
        self.revision: int | None = None
        """The revision the served set (or the error) comes from; None: nothing read yet."""
        self.error: str | None = None
        self.outage: str | None = None
        self._task: asyncio.Task | None = None
        self._up = metrics.STATE_STORE_UP.labels(store.engine.dialect.name)
        self._apply(self.poll())

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
        return {"state_store": f"unreachable: {self.outage}" if self.outage else "ok"}

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
        """The store's revision; when it moved since the served set, the state read and built (blocking calls)."""
        try:
            revision = self.store.revision()
            if revision == self.revision:
                return Poll(revision)
            state = self.store.read()
        except StateStoreUnavailable as exc:
            return Poll(outage=exc.reason)
        except ConfigurationError as exc:
            return Poll(revision, error=exc.message)
        try:
            return Poll(revision, loaded=self.build(state))
        except Exception as exc:  # noqa: BLE001 - keep serving the last good state; report this one
            return Poll(revision, error=str(exc))

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
        if found.loaded is not None:
            self.current, self.error = found.loaded, None
            log.info("deployment state revision %s applied", found.revision)
        elif found.error is not None:
            self.error = found.error
            log.error(
                "deployment state revision %s not applied, still serving the last one: %s", found.revision, found.error
            )
        self.revision = found.revision
        metrics.CONFIG_ERRORS.labels(NAME).set(len(self.errors()))
        return found.loaded is not None
