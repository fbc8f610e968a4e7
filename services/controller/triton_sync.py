"""Keeping Triton in step with the state: live versions Triton lost are loaded again, versions beyond an endpoint's
newest `max_versions` start draining, and drained versions (no new traffic for `drain_seconds`, longer than the
gateway's workers take to see the change and finish their requests) are unloaded.

With CONTROLLER_PLACEMENT=agents the replicas' agents do the loading and unloading (`services.replica.agent`): a
version the state no longer lists, or no longer wants on replicas (`placement.wanted`), leaves every Triton by
itself. The controller then neither reconciles nor unloads: its step is `forget_drained`, which changes only the state
and removes its own fetched copy.

A version's files are found and removed under the controller's models directory by the endpoint's name and the version
(`model_dirs`), never at a path the state names."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable

from services.controller.settings import ControllerSettings
from services.lifecycle import transitions
from services.lifecycle.model_dirs import artifact_dir, version_root
from services.lifecycle.ports import TritonControl
from services.lifecycle.store import DeploymentStore

log = logging.getLogger("controller")


class TritonSync:
    def __init__(
        self, settings: ControllerSettings, store: DeploymentStore, triton: TritonControl, clock: Callable[[], float]
    ):
        self.settings, self.store, self.triton, self.clock = settings, store, triton, clock

    def reconcile(self, name: str) -> None:
        """Live versions Triton does not serve (it restarted with a freshly rendered repository) are loaded again."""
        endpoint = self.store.endpoint(name)
        missing = [v for v in endpoint.live() if not self.triton.ready(name, v)] if endpoint else []
        if not missing:
            return
        for version in missing:
            self.triton.place(name, version, artifact_dir(self.settings.models_dir, name, version))
        self.triton.load(name)
        for version in missing:
            self.triton.wait_ready(name, version)
        log.info("endpoint '%s': versions %s loaded into Triton again", name, missing)

    def prune(self, name: str) -> None:
        """Live versions beyond the newest `max_versions` (and not in a rollout or a canary split) start draining."""
        endpoint = self.store.endpoint(name)
        if endpoint is None or not transitions.to_retire(endpoint):
            return
        now = self.clock()
        retired = self.store.update(lambda s: transitions.prune(s, name, now))
        log.info("endpoint '%s': draining versions %s (beyond the newest %d)", name, retired, endpoint.max_versions)

    def unload_drained(self, name: str) -> None:
        """Versions out of traffic long enough leave Triton; drained ones are then forgotten with their files."""
        self._finish_drained(name, unload=True)

    def forget_drained(self, name: str) -> None:
        """Versions out of traffic long enough are forgotten with the controller's fetched files (the replicas' agents
        unload them)."""
        self._finish_drained(name, unload=False)

    def _finish_drained(self, name: str, *, unload: bool) -> None:
        endpoint = self.store.endpoint(name)
        due = transitions.due_for_unload(endpoint, self.clock(), self.settings.drain_seconds) if endpoint else []
        if not due:
            return
        if unload:
            for version in due:
                self.triton.remove(name, version)
            self.triton.load(name)
        for version in self.store.update(lambda s: transitions.finish_drained(s, name, due)):
            shutil.rmtree(version_root(self.settings.models_dir, name, version), ignore_errors=True)
        log.info("endpoint '%s': versions %s unloaded", name, due)
