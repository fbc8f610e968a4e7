"""The endpoint file as a watched source: its stamp is the file's and that of every preprocess file the served
snapshot names, so an edit to either is a change; a file that fails to load leaves the previous snapshot serving."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.api.endpoint import Endpoints
from services.gateway.endpoints import EndpointsFile
from services.gateway.preprocess import source_stamp
from services.gateway.watcher import Poll, Watcher, redact_paths


def file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def stamps(paths: list[Path]) -> tuple:
    return tuple(source_stamp(path) for path in paths)


class FileSource:
    def __init__(
        self, path: Path, load: Callable[[EndpointsFile], Endpoints], health: Callable[[], dict[str, str]] = dict
    ):
        self.path = path
        self.name = path.name
        self.load = load
        self._health = health
        """What /health/ready says of the served endpoints' code (`user_threads`)."""
        self.sources: list[Path] = []
        """Every preprocess file or folder the served snapshot's file names (those that failed too): an edit
        reloads."""

    def poll(self, served: tuple | None) -> Poll:
        stamp = (file_stamp(self.path), stamps(self.sources))
        if stamp == served:
            return Poll(stamp)
        try:
            file = EndpointsFile.read(self.path)
            sources = file.preprocess_paths(self.path.parent)
            read = stamps(sources)  # before any is read: an edit made while it loads is a change
            loaded = self.load(file)
        except Exception as exc:  # noqa: BLE001 - keep serving the last good configuration; report this one
            return Poll(stamp, error=str(exc))
        self.sources = sources
        return Poll((stamp[0], read), loaded=loaded)

    def redact(self, text: str) -> str:
        """File names relative to the file's folder, no absolute path."""
        return redact_paths(text, self.path.parent)

    def health(self) -> dict[str, str]:
        return self._health()

    def describe(self, stamp: tuple | None) -> str:
        return str(self.path)


def FileWatcher(  # noqa: N802 - a watcher of a file, built like one
    path: Path,
    load: Callable[[EndpointsFile], Endpoints],
    interval: float,
    retire_after: float = 0.0,
    health: Callable[[], dict[str, str]] = dict,
) -> Watcher:
    """A watcher of the endpoint file at `path`, whose snapshots `load` builds from the file as read."""
    return Watcher(FileSource(path, load, health), interval, retire_after)
