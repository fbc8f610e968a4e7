"""What a process remembers of the deployment state store: the newest state it read (its stamp and document).

Kept in memory, and for an embedded SQLite store also in a file beside the store's (`<store>.last-good.json`,
written under a lock, replaced whole), which every process of the host shares: a worker that restarts against a
store that lost its state knows that it had one, refuses it, and serves the last good state from this file."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from services.common.locked_file import LockedFile
from services.common.private import write_private
from services.lifecycle.deployments import LARGEST_COUNT, RESTORE_ABOVE_MS, epoch_ahead
from services.lifecycle.store.rules import Stamp

log = logging.getLogger(__name__)
SUFFIX = ".last-good.json"


def last_good_file(store_file: Path) -> Path:
    """The memory file of a SQLite store's file."""
    return store_file.with_name(store_file.name + SUFFIX)


class StateMemory:
    """The newest stamp and document seen; `path` None: this process's memory only."""

    def __init__(self, path: Path | None):
        self.file = LockedFile(path) if path is not None else None
        self._lock = threading.Lock()
        self._loaded = False
        self._stamp: Stamp | None = None
        self._document: str | None = None
        self._unwritable = False

    def seen(self) -> Stamp | None:
        """The newest stamp this process (or, with a file, this host) saw; None: none yet."""
        self._load()
        return self._stamp

    def remembered(self) -> tuple[Stamp, str] | None:
        """The newest stamp seen and its document, when known."""
        self._load()
        with self._lock:
            return (self._stamp, self._document) if self._stamp is not None and self._document is not None else None

    def record(self, stamp: Stamp, document: str, *, persist: bool = True) -> None:
        """`stamp` and its document as the newest seen, when newer than what is remembered; with `persist`, in the
        file too (a write under its lock: readers persist, while writers racing on the compare-and-swap remember in
        memory only, and the readers that follow every change write it to the file)."""
        self._load()
        with self._lock:
            if self._stamp is not None and stamp <= self._stamp:
                return
            self._stamp, self._document = stamp, document
        if self.file is None or not persist:
            return
        try:
            with self.file.locked():
                stored = _read(self.file.path)
                if stored is None or stamp > stored[0]:
                    _replace(self.file.path, {"epoch": stamp.epoch, "revision": stamp.revision, "state": document})
        except OSError as error:
            if not self._unwritable:
                log.warning("%s not written (%s): a restarted process will not know this state", self.file.path, error)
            self._unwritable = True

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            stored = _read(self.file.path) if self.file is not None else None
            if stored is not None and (self._stamp is None or stored[0] > self._stamp):
                self._stamp, self._document = stored


def _replace(path: Path, content: dict) -> None:
    """The file's new content in one step (written beside it, moved over it), not flushed to disk: the file is a
    hint that each committed change rewrites, and one left empty by a crash counts as a state seen (`_read`)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    write_private(tmp, json.dumps(content))
    os.replace(tmp, path)


def _read(path: Path) -> tuple[Stamp, str | None] | None:
    """The stamp and document of a memory file; None when there is none. A file that cannot be read says so and
    counts as a state seen at revision 1 (it exists: a state was seen), without a document to serve."""
    try:
        data = json.loads(path.read_text())
        stamp, document = Stamp(int(data["epoch"]), int(data["revision"])), str(data["state"])
        if epoch_ahead(stamp.epoch, RESTORE_ABOVE_MS) or not 0 <= stamp.revision <= LARGEST_COUNT:
            raise ValueError(f"its stamp {tuple(stamp)} is no restore epoch and revision this host could have read")
        return stamp, document
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.error("%s is unreadable (%s): taken as a state seen, with nothing to serve from it", path, error)
        return Stamp(0, 1), None
