"""The endpoint file as a watched source: its stamp is the file's and that of every preprocess file the served set
names, so an edit to either is a change; a file that fails to load leaves the previous set serving."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.gateway.watcher import EndpointSet, Poll, Watcher, redact_paths


def file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


class FileSource:
    def __init__(self, path: Path, load: Callable[[Path], EndpointSet], health: Callable[[], dict[str, str]] = dict):
        self.path = path
        self.name = path.name
        self.load = load
        self._health = health
        """What /health/ready says of the served endpoints' code (`user_threads`)."""

    def poll(self, served: tuple | None, current: EndpointSet) -> Poll:
        stamp = (file_stamp(self.path), current.source_stamps())
        if stamp == served:
            return Poll(stamp)
        try:
            loaded = self.load(self.path)
        except Exception as exc:  # noqa: BLE001 - keep serving the last good configuration; report this one
            return Poll(stamp, error=str(exc))
        return Poll((stamp[0], loaded.read_stamps()), loaded=loaded)

    def redact(self, text: str) -> str:
        """File names relative to the file's folder, no absolute path."""
        return redact_paths(text, self.path.parent)

    def health(self) -> dict[str, str]:
        return self._health()

    def describe(self, stamp: tuple | None) -> str:
        return str(self.path)


def FileWatcher(  # noqa: N802 - a watcher of a file, built like one
    path: Path,
    load: Callable[[Path], EndpointSet],
    interval: float,
    retire_after: float = 0.0,
    health: Callable[[], dict[str, str]] = dict,
) -> Watcher:
    """A watcher of the endpoint file at `path`, whose sets `load` builds."""
    return Watcher(FileSource(path, load, health), interval, retire_after)
