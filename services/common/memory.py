"""Memory a burst of big requests leaves behind, given back to the system once the burst is over.

glibc's malloc keeps what a process frees for its next allocations rather than returning it, and after a large block
is freed it serves blocks of that size from its heap (its mmap threshold rises), where a few live blocks pin the
pages around them, so a burst of big requests leaves a process above its size before the burst, for good
(docs/decisions/request-bounds.md). `malloc_trim(0)` returns every free page of every arena (glibc >= 2.8); it takes
a few milliseconds on a heap of a few hundred MB, so it runs on a thread of its own, once big work has stopped for
`delay` seconds, not after each piece of it. Where the C library has no `malloc_trim` (musl, macOS) it does nothing.

The thread is stopped at the interpreter's exit (`atexit`), a release it is running finished first: a daemon thread
still inside ONNX Runtime when the interpreter finalizes is ended by `pthread_exit` through C++ frames that may not
unwind, and the process aborts (docs/decisions/exit-abort.md).
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import logging
import threading
import time
from collections.abc import Callable
from functools import cache

log = logging.getLogger(__name__)

DELAY = 0.5
"""Seconds without big work before the memory is trimmed."""


@cache
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def trim() -> bool:
    """Return the C heap's free pages to the system now; whether the C library could."""
    malloc_trim = _malloc_trim()
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True


class Trimmer:
    """`big_work_done()` after each big piece of work; `delay` seconds after the last one, the releases it was given
    run (an ONNX Runtime session's arena: `services.common.onnx_runner`), then `trim()`, once."""

    def __init__(self, delay: float = DELAY):
        self.delay = delay
        self._due: float | None = None
        self._releases: set[Callable[[], None]] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def big_work_done(self, release: Callable[[], None] | None = None) -> None:
        with self._wake:
            if self._stopped:
                return
            if release is not None:
                self._releases.add(release)
            self._due = time.monotonic() + self.delay
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="malloc-trim", daemon=True)
                self._thread.start()
                atexit.register(self.stop)
            self._wake.notify()

    def stop(self) -> None:
        """End the thread: releases not yet due are dropped, one running is finished first (at exit, nothing is
        worth giving back). Later `big_work_done` calls do nothing."""
        with self._wake:
            self._stopped = True
            self._releases.clear()
            thread = self._thread
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and (self._due is None or self._due > time.monotonic()):
                    self._wake.wait(None if self._due is None else self._due - time.monotonic())
                if self._stopped:
                    return
                self._due = None
                releases, self._releases = self._releases, set()
            for release in releases:  # outside the lock: work finishing meanwhile is not held up
                try:
                    release()
                except Exception:  # noqa: BLE001 - memory not given back is no reason to stop trimming
                    log.warning("releasing memory failed", exc_info=True)
            trim()


trimmer = Trimmer()
"""The process's own: what does big work pokes it."""
