"""Registry-deployed endpoints that follow the shared deployment state (`services.lifecycle.store`). Each worker asks
the store for its revision (one small query) every poll interval; when it moved, it reads the state, builds the new
set off the event loop and swaps it in with one assignment: requests in flight finish on the old set, none waits.

While the store cannot be reached the last set keeps serving: `/health/ready` says `"state_store": "unreachable:
<why>"` (still 200, since serving goes on) and `serving_state_store_up` is 0; the first poll that reaches the store
again says so and catches up with whatever changed meanwhile.

A store that lost its state (its tables gone, its file emptied or replaced) or holds an older state than the worker
applied is not applied either (`services.lifecycle.store.rules`): the last set keeps serving, `/health/ready` says
`"state_store": "lost: <what happened>; <what to do>"`, `serving_state_store_regressed` is 1 and the log says it at
ERROR. A worker that starts against such a store serves the last good state this host read
(`DeploymentStore.remembered`). Once an operator restored the store, its new epoch makes it newer, and it is followed
again.

A state that breaks a rule (`deployments`: a name, a version, a bound) is not applied either: the last set keeps
serving, `/health/ready`'s `config_errors` says which field breaks which rule, `serving_config_errors{file="deployment
state"}` is 1 and the log says it once at ERROR. A worker that starts against one serves the last good state this host
read, as with a lost one; the next valid state is followed again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from observability import metrics
from services.api.endpoint import Endpoints
from services.common.errors import ConfigurationError
from services.gateway.watcher import Poll, Watcher, redact_paths
from services.lifecycle.deployments import Deployments, StateInvalid
from services.lifecycle.store import DeploymentStore, Stamp, StateLost, StateStoreUnavailable

log = logging.getLogger(__name__)
NAME = "deployment state"
"""Its key in `/health/ready`'s config_errors and its `file` label in `serving_config_errors`."""


class StoreSource:
    """The deployment store as a watched source: its stamp is the store's (epoch, revision)."""

    name = NAME

    def __init__(self, store: DeploymentStore, build: Callable[[Deployments], Endpoints]):
        self.store = store
        self.build = build
        self.outage: str | None = None
        """Why the store cannot be reached; None while it answers."""
        self.lost: str | None = None
        """What happened to a store that lost its state or holds an older one, and what to do; None: it holds one."""
        self._up = metrics.STATE_STORE_UP.labels(store.backend)
        self._regressed = metrics.STATE_STORE_REGRESSED.labels(store.backend)

    def poll(self, served: Stamp | None) -> Poll:
        """The store's stamp; when it moved since `served`, the state read and built (blocking calls)."""
        stamp = None
        try:
            stamp = self.store.stamp()
            self._reachable()
            if stamp == served:
                self._follow_lost(None, served)
                return Poll(stamp)
            state = self.store.read()
        except StateLost as exc:
            self._reachable()
            return self._lost(exc.reason, served)
        except StateStoreUnavailable as exc:
            self._unreachable(exc.reason, served)
            return Poll()
        except StateInvalid as exc:
            self._follow_lost(None, served)
            return self._invalid(stamp, exc.message, served)
        except ConfigurationError as exc:
            self._follow_lost(None, served)
            return Poll(stamp, error=exc.message)
        self._follow_lost(None, served)
        return self._built(stamp, state)

    def redact(self, text: str) -> str:
        return redact_paths(text, Path("/"))

    def health(self) -> dict[str, str]:
        if self.outage:
            return {"state_store": f"unreachable: {self.outage}"}
        return {"state_store": f"lost: {self.lost}" if self.lost else "ok"}

    def describe(self, stamp: Stamp | None) -> str:
        return f"deployment state {stamp}"

    def _built(self, stamp: Stamp, state: Deployments) -> Poll:
        try:
            return Poll(stamp, loaded=self.build(state))
        except Exception as exc:  # noqa: BLE001 - keep serving the last good state; report this one
            return Poll(stamp, error=str(exc))

    def _lost(self, reason: str, served: Stamp | None) -> Poll:
        """Nothing applied from the store; a worker that serves nothing yet builds the last good state of its host."""
        remembered = self.store.remembered() if served is None else None
        found = Poll() if remembered is None else self._built(*remembered)
        if found.loaded is not None:
            log.warning("serving this host's last good copy of the deployment state, %s", found.stamp)
        self._follow_lost(reason, found.stamp if found.loaded is not None else served)
        return found

    def _invalid(self, stamp: Stamp | None, problem: str, served: Stamp | None) -> Poll:
        """Nothing applied from an invalid state; a worker that serves nothing yet builds the last good state of its
        host, and says both."""
        remembered = self.store.remembered() if served is None else None
        found = Poll() if remembered is None else self._built(*remembered)
        if found.loaded is not None:
            log.warning("serving this host's last good copy of the deployment state, %s", found.stamp)
        return Poll(stamp, loaded=found.loaded, error=problem)

    def _unreachable(self, reason: str, served: Stamp | None) -> None:
        if self.outage is None:
            log.error("deployment state store %s unreachable, serving revision %s: %s", self.store.url, served, reason)
        self.outage = reason
        self._up.set(0)

    def _reachable(self) -> None:
        if self.outage is not None:
            log.info("deployment state store %s reachable again", self.store.url)
        self.outage = None
        self._up.set(1)

    def _follow_lost(self, lost: str | None, serving: Stamp | None) -> None:
        if lost is not None and lost != self.lost:
            log.error(
                "deployment state store %s lost its state, serving %s: %s", self.store.url, serving or "nothing", lost
            )
        elif lost is None and self.lost is not None:
            log.warning("deployment state store %s holds a state again; following it", self.store.url)
        self.lost = lost
        self._regressed.set(1 if lost else 0)


def StoreWatcher(  # noqa: N802 - a watcher of the store, built like one
    store: DeploymentStore, build: Callable[[Deployments], Endpoints], interval: float
) -> Watcher:
    """A watcher of the deployment state in `store`, whose sets `build` makes."""
    return Watcher(StoreSource(store, build), interval)
