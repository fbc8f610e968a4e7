"""Endpoint sets that follow a file: the endpoint file (configured endpoints) and the deployment state (registry-
deployed endpoints). A worker polls the file; on a change it builds the new set beside the old one, off the event
loop, and swaps it in with one assignment: requests in flight finish on the old set, no request waits for the reload
(clearml-serving pauses all traffic on a change; this does not)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from observability import metrics
from services.common.backend import ModelEndpoint, PipelineEndpoint
from services.monitoring.statistics import EndpointMetrics

log = logging.getLogger(__name__)


class EndpointSet(Protocol):
    """An immutable set of endpoints built from one file in one go (`ConfiguredEndpoints`, `DeployedEndpoints`):
    what a FileWatcher serves, and replaces whole when the file changes."""

    errors: dict[str, str]
    """The file's entries that were left out, and why (key: the endpoint)."""
    metrics: dict[str, EndpointMetrics]
    """Custom statistics the file declares, by endpoint name (for any endpoint of the server)."""

    def get(self, name: str) -> ModelEndpoint | PipelineEndpoint | None: ...

    def names(self) -> list[str]: ...

    def source_stamps(self) -> tuple:
        """Stamps of the other files it was built from (preprocess code): when one changes, the set is rebuilt."""

    def unload(self) -> None:
        """Release what it loaded (user code's unload()), once no request uses it any more."""


class EmptyEndpoints:
    """What a watcher serves while its file has never loaded."""

    errors: dict[str, str] = {}
    metrics: dict[str, EndpointMetrics] = {}

    def get(self, name: str) -> None:
        return None

    def names(self) -> list[str]:
        return []

    def source_stamps(self) -> tuple:
        return ()

    def unload(self) -> None:
        return None


def file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


class FileWatcher:
    """An endpoint resolver over a file: polls it; on a change builds a new set with `load(path)` off the event loop
    and swaps it in. A file that fails to load leaves the previous set serving."""

    def __init__(self, path: Path, load: Callable[[Path], EndpointSet], interval: float, retire_after: float = 0.0):
        self.path = path
        self.load = load
        self.interval = interval
        self.retire_after = retire_after
        """Seconds a replaced set stays loaded (its requests in flight finish) before its unload() runs."""
        self.error: str | None = None
        self.current: EndpointSet
        try:
            self.current = load(path)
        except Exception as exc:  # noqa: BLE001 - start serving what else there is; report the file's problem
            self.current = EmptyEndpoints()
            self.error = str(exc)
            log.error("%s not applied: %s", path, exc)
        self.stamp = self._stamp()
        self._report()
        self._task: asyncio.Task | None = None
        self._retiring: set[asyncio.Task] = set()

    def _stamp(self) -> tuple:
        """The file's, and the preprocess code's it names (an edit to a preprocess file reloads it too)."""
        return (file_stamp(self.path), self.current.source_stamps())

    def resolve(self, name: str) -> ModelEndpoint | PipelineEndpoint | None:
        return self.current.get(name)

    def names(self) -> list[str]:
        return self.current.names()

    def declared(self, name: str) -> EndpointMetrics | None:
        return self.current.metrics.get(name)

    def errors(self) -> dict[str, str]:
        """What is wrong with the file (key: its path) or with entries in it (key: the endpoint)."""
        errors = dict(self.current.errors)
        if self.error:
            errors[str(self.path)] = f"{self.error} (still serving the previous configuration)"
        return errors

    def _report(self) -> None:
        metrics.CONFIG_ERRORS.labels(self.path.name).set(len(self.errors()))

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        for task in self._retiring:
            task.cancel()
        await asyncio.to_thread(self.current.unload)

    async def _retire(self, replaced: EndpointSet) -> None:
        await asyncio.sleep(self.retire_after)
        await asyncio.to_thread(replaced.unload)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    async def check(self) -> bool:
        """Reload if the file or its sources changed; True when a new set was swapped in."""
        stamp = self._stamp()
        if stamp == self.stamp:
            return False
        try:
            loaded = await asyncio.to_thread(self.load, self.path)
        except Exception as exc:  # noqa: BLE001 - keep serving the last good configuration
            log.error("%s not applied, still serving the previous configuration: %s", self.path, exc)
            self.stamp, self.error = stamp, str(exc)
            self._report()
            return False
        previous = self.current
        self.current, self.error = loaded, None
        self.stamp = self._stamp()
        self._report()
        task = asyncio.get_running_loop().create_task(self._retire(previous))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        for name, problem in loaded.errors.items():
            log.error("%s: endpoint '%s' not served: %s", self.path, name, problem)
        log.info("configuration reloaded from %s", self.path)
        return True
