"""A small file that several processes change (the deployment state, the gateway's endpoint file): every change a
read-modify-write under an exclusive lock, the new content written beside the file and moved over it with
`os.replace`. Writers never lose each other's changes (two `serving endpoints add` at once, the admin API and the
controller); readers take no lock and always see one complete version, the old or the new.

The lock is `flock` on a sibling `NAME.lock` file, not on the file itself, which `os.replace` swaps out from under
any descriptor. Each `open` is its own lock holder, so threads of one process exclude each other too.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from services.common.private import made_private, open_private

S = TypeVar("S")
T = TypeVar("T")


class LockedFile:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive against every other writer of the file, in any process; released if the holder dies."""
        made_private(self.path.parent)
        with os.fdopen(open_private(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def replace(self, text: str) -> None:
        """Write `text` as the file's new content in one step (call it under `locked`). Flushed to disk before the
        rename, so a crash leaves the old version or the new one, never an empty file. The file is its owner's alone
        (0600)."""
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    def update(self, read: Callable[[], S], change: Callable[[S], T], dump: Callable[[S], str]) -> T:
        """Under the lock: `read` the content, apply `change` to it (which may raise to abort: nothing is written),
        write `dump` of it. Returns what `change` returned."""
        with self.locked():
            content = read()
            result = change(content)
            self.replace(dump(content))
        return result
