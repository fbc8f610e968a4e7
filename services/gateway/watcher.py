"""Endpoints that follow a source: the endpoint file (configured endpoints, `file_source`) and the deployment state
(registry-deployed endpoints, `state_source`). One `Watcher` polls each source; on a change the source builds the new
snapshot (`Endpoints`) beside the old one, off the event loop, and the watcher swaps it in with one assignment:
requests in flight finish on the old snapshot, no request waits for the reload (clearml-serving pauses all traffic on
a change; this does not). A source that fails to build leaves the previous snapshot serving, and says why."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from observability import metrics
from services.api.endpoint import Endpoints, EndpointSource
from services.common.names import printable

log = logging.getLogger(__name__)


@dataclass
class Poll:
    """What one look at a source found (taken off the event loop, applied on it)."""

    stamp: Any = None
    """Where the source stands now; None: it could not tell (the served snapshot stays, and its stamp)."""
    loaded: Endpoints | None = None
    """The snapshot built from the source at `stamp`, to serve; None: nothing new to serve. With an `error`: the
    last good snapshot of the source, served in its place (a worker that starts against a state it cannot serve)."""
    error: str | None = None
    """The source at `stamp` could not be served: why."""


class Source(Protocol):
    """What a `Watcher` follows."""

    name: str
    """Its key in /health/ready's config_errors and its `file` label in `serving_config_errors`."""

    def poll(self, served: Any) -> Poll:
        """Where the source stands; when it moved since `served` (the served snapshot's stamp), the snapshot built
        from it (blocking: run off the event loop)."""

    def redact(self, text: str) -> str:
        """`text` as the open /health/ready may show it (no host paths)."""

    def health(self) -> dict[str, str]:
        """What /health/ready says of the source beside its errors."""

    def describe(self, stamp: Any) -> str:
        """The source at `stamp`, for the log."""


class Watcher(EndpointSource):
    """An endpoint source over a polled source: polls it every `interval` seconds and serves the last snapshot it
    built.

    A source's stamps are taken before it is read, never after: a change made while a (slow) build was reading is
    a change still to apply, so `check` builds again at once (up to `REBUILDS` times) rather than take it for the
    snapshot being served. A replaced snapshot stays loaded `retire_after` seconds (its requests in flight finish)
    before its unload() runs."""

    REBUILDS = 3

    def __init__(self, source: Source, interval: float, retire_after: float = 0.0):
        self.source = source
        self.interval = interval
        self.retire_after = retire_after
        self.served = Endpoints()
        self.stamp: Any = None
        """The served snapshot's stamp (or that of the source's last error); None: nothing read yet."""
        self.error: str | None = None
        self._task: asyncio.Task | None = None
        self._retiring: dict[asyncio.Task, Endpoints] = {}
        """Replaced snapshots waiting out `retire_after`, by the task that unloads them."""
        self._apply(source.poll(None))

    @property
    def revision(self) -> int | None:
        """The served state's revision, for a source stamped with one (the deployment state)."""
        return getattr(self.stamp, "revision", None)

    def current(self) -> Endpoints:
        return self.served

    def errors(self) -> dict[str, str]:
        """What is wrong with the source (key: its name) or with entries in it (key: the endpoint), as the open
        /health/ready shows it (the log has the full text of each problem)."""
        errors = {name: self.source.redact(problem) for name, problem in self.served.errors.items()}
        if self.error:
            errors[self.source.name] = self.source.redact(self.error) + " (still serving the previous one)"
        return errors

    def health(self) -> dict[str, str]:
        return self.source.health()

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
        await asyncio.to_thread(self.served.unload)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    async def check(self) -> bool:
        """Build and swap in while the source moved since the served snapshot (at most `REBUILDS` builds); True when
        a new snapshot was swapped in."""
        swapped = False
        for _ in range(self.REBUILDS):
            found = await asyncio.to_thread(self.source.poll, self.stamp)
            previous = self.served
            if not self._apply(found):
                break
            task = asyncio.get_running_loop().create_task(self._retire(previous))
            self._retiring[task] = previous
            swapped = True
        return swapped

    def _apply(self, found: Poll) -> bool:
        """Serve what `found` built (True), or keep serving and record its error."""
        if found.loaded is not None:
            self.served, self.error = found.loaded, None
            if found.error is None:
                log.info("%s applied", self.source.describe(found.stamp))
            for name, problem in self.served.errors.items():
                log.error("%s: endpoint '%s' not served: %s", self.source.name, printable(name), problem)
        if found.error is not None:
            self.error = found.error
            log.error(
                "%s not applied, still serving the previous one: %s", self.source.describe(found.stamp), found.error
            )
        if found.stamp is not None:
            self.stamp = found.stamp
        metrics.CONFIG_ERRORS.labels(self.source.name).set(len(self.errors()))
        return found.loaded is not None

    async def _retire(self, replaced: Endpoints) -> None:
        await asyncio.sleep(self.retire_after)
        if (task := asyncio.current_task()) is not None:
            self._retiring.pop(task, None)
        await asyncio.to_thread(replaced.unload)


_QUOTED_PATH = re.compile(r"""(['"])/(?:[^'"\n]*/)?([^'"/\n]*)\1""")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/(?:[^\s'\"/:;,()\[\]{}]+/)*([^\s'\"/:;,()\[\]{}]*)")


def redact_paths(text: str, base: Path) -> str:
    """`text` without absolute paths: those under `base` made relative to it, any other one cut to its last part."""
    for prefix in {str(Path(base).resolve()) + "/", str(base) + "/"}:
        text = text.replace(prefix, "")
    text = _QUOTED_PATH.sub(lambda m: m.group(1) + m.group(2) + m.group(1), text)
    return _ABSOLUTE_PATH.sub(lambda m: m.group(1), text)
