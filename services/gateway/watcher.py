"""Endpoint sets that follow a file: the endpoint file (configured endpoints) and the deployment state (registry-
deployed endpoints). A worker polls the file; on a change it builds the new set beside the old one, off the event
loop, and swaps it in with one assignment: requests in flight finish on the old set, no request waits for the reload
(clearml-serving pauses all traffic on a change; this does not)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from observability import metrics
from services.common.backend import ModelEndpoint, PipelineEndpoint
from services.common.names import printable
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
        """Stamps of the other files it was built from (preprocess code), as they are now on disk."""

    def read_stamps(self) -> tuple:
        """The same stamps taken just before the set read those files: when `source_stamps()` differs from them,
        a file changed after it was read (perhaps while the set was being built), and the set is rebuilt."""

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

    def read_stamps(self) -> tuple:
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
    and swaps it in. A file that fails to load leaves the previous set serving.

    The stamps a set is known by are taken before it is read, never after: an edit made while a (slow) build was
    reading the files is a change still to apply, so it is rebuilt at once rather than taken for the version
    being served (which kept a broken preprocess file served until something else touched the file)."""

    REBUILDS = 3
    """Builds one `check` runs in a row while the files keep changing under it; the next poll carries on."""

    def __init__(
        self,
        path: Path,
        load: Callable[[Path], EndpointSet],
        interval: float,
        retire_after: float = 0.0,
        health: Callable[[], dict[str, str]] = dict,
    ):
        self.path = path
        self._health = health
        """What /health/ready says of the served endpoints' code beside the file's problems (`user_threads`)."""
        self.load = load
        self.interval = interval
        self.retire_after = retire_after
        """Seconds a replaced set stays loaded (its requests in flight finish) before its unload() runs."""
        self.error: str | None = None
        self.current: EndpointSet = EmptyEndpoints()
        stamp = file_stamp(path)
        try:
            self.current = load(path)
        except Exception as exc:  # noqa: BLE001 - start serving what else there is; report the file's problem
            self.error = str(exc)
            log.error("%s not applied: %s", path, exc)
        self.stamp = (stamp, self.current.read_stamps())
        self._report()
        self._log_entry_errors()
        self._task: asyncio.Task | None = None
        self._retiring: dict[asyncio.Task, EndpointSet] = {}
        """Replaced sets waiting out `retire_after`, by the task that unloads them."""

    def _on_disk(self) -> tuple:
        """The file's stamp and those of the preprocess code the served set names, as they are now."""
        return (file_stamp(self.path), self.current.source_stamps())

    def resolve(self, name: str) -> ModelEndpoint | PipelineEndpoint | None:
        return self.current.get(name)

    def names(self) -> list[str]:
        return self.current.names()

    def declared(self, name: str) -> EndpointMetrics | None:
        return self.current.metrics.get(name)

    def errors(self) -> dict[str, str]:
        """What is wrong with the file (key: its name) or with entries in it (key: the endpoint), as the open
        /health/ready shows it: file names relative to the file's folder, no absolute path (the log has the full
        text of each problem)."""
        errors = {name: redact_paths(problem, self.path.parent) for name, problem in self.current.errors.items()}
        if self.error:
            errors[self.path.name] = redact_paths(self.error, self.path.parent) + " (still serving the previous one)"
        return errors

    def health(self) -> dict[str, str]:
        return self._health()

    def _report(self) -> None:
        metrics.CONFIG_ERRORS.labels(self.path.name).set(len(self.errors()))

    def _log_entry_errors(self) -> None:
        for name, problem in self.current.errors.items():
            log.error("%s: endpoint '%s' not served: %s", self.path, printable(name), problem)

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        retiring = list(self._retiring.items())
        self._retiring.clear()
        for task, replaced in retiring:  # the worker stops: no request is left for them, unload them now
            task.cancel()
            await asyncio.to_thread(replaced.unload)
        await asyncio.to_thread(self.current.unload)

    async def _retire(self, replaced: EndpointSet) -> None:
        await asyncio.sleep(self.retire_after)
        self._retiring.pop(asyncio.current_task(), None)
        await asyncio.to_thread(replaced.unload)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    async def check(self) -> bool:
        """Reload while the file or its sources differ from what the served set was read from (at most
        `REBUILDS` builds); True when a new set was swapped in."""
        swapped = False
        for _ in range(self.REBUILDS):
            stamp = self._on_disk()
            if stamp == self.stamp:
                break
            try:
                loaded = await asyncio.to_thread(self.load, self.path)
            except Exception as exc:  # noqa: BLE001 - keep serving the last good configuration
                log.error("%s not applied, still serving the previous configuration: %s", self.path, exc)
                self.stamp, self.error = stamp, str(exc)
                self._report()
                break
            self._swap(loaded, (stamp[0], loaded.read_stamps()))
            swapped = True
        return swapped

    def _swap(self, loaded: EndpointSet, stamp: tuple) -> None:
        previous = self.current
        self.current, self.error, self.stamp = loaded, None, stamp
        self._report()
        self._log_entry_errors()
        task = asyncio.get_running_loop().create_task(self._retire(previous))
        self._retiring[task] = previous
        log.info("configuration reloaded from %s", self.path)


_QUOTED_PATH = re.compile(r"""(['"])/(?:[^'"\n]*/)?([^'"/\n]*)\1""")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/(?:[^\s'\"/:;,()\[\]{}]+/)*([^\s'\"/:;,()\[\]{}]*)")


def redact_paths(text: str, base: Path) -> str:
    """`text` without absolute paths: those under `base` made relative to it, any other one cut to its last part."""
    for prefix in {str(Path(base).resolve()) + "/", str(base) + "/"}:
        text = text.replace(prefix, "")
    text = _QUOTED_PATH.sub(lambda m: m.group(1) + m.group(2) + m.group(1), text)
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1), text)
