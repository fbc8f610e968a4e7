"""Where users' code runs on a gateway worker, and the bounds that keep code that hangs from taking the worker with it.

Synchronous steps (preprocess, process, postprocess, a model engine's predict) run on `UserThreads`, a pool of the
worker's own: asyncio's default pool stays for the gateway's own blocking work (file and store polling, model
opening). Python cannot stop a thread, so code that never returns keeps its thread for good. Each such thread is
counted (`serving_user_code_threads_busy`, and /health/ready names them once they have run past the request
timeout), and once no thread is free a step that needs one is refused at once with 503 and Retry-After, instead of
queueing until the request's deadline behind threads that never come back.

Building an endpoint (importing its code, `Preprocess()` and `load()`) and `unload()` run on a thread of their own
each with a time limit (`call_within`): one endpoint whose `load()` hangs is left out and reported, the others are
served, and a reload or a shutdown never waits on it.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import count
from typing import Any, TypeVar

from observability import metrics
from services.common.errors import Unavailable

T = TypeVar("T")


class UserThreads:
    """The worker's threads for synchronous user code: `size` of them (`services.gateway.app.user_code_threads`)."""

    def __init__(self, size: int, stuck_after: float, retry_after: float = 1.0):
        self.size = size
        self.stuck_after = stuck_after
        """Seconds after which a thread still running user code is reported as stuck (the request timeout)."""
        self.retry_after = retry_after
        self._pool = ThreadPoolExecutor(size, thread_name_prefix="user-code")
        self._started: dict[int, float] = {}
        """When each running call began (monotonic), by call number."""
        self._lock = threading.Lock()
        self._numbers = count()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` on a free thread, with the caller's context (trace, request id); Unavailable (503) at
        once when every thread is taken."""
        with self._lock:
            full = len(self._started) >= self.size
            if not full:
                number = next(self._numbers)
                self._started[number] = time.monotonic()
        if full:
            raise Unavailable(self._refusal(), retry_after=self.retry_after)
        metrics.USER_CODE_THREADS_BUSY.inc()

        def release() -> None:
            with self._lock:
                del self._started[number]
            metrics.USER_CODE_THREADS_BUSY.dec()

        def call() -> T:
            try:
                return function(*args)
            finally:
                release()

        try:
            future = self._pool.submit(contextvars.copy_context().run, call)
        except RuntimeError:  # the interpreter is shutting down: the worker is stopping
            release()
            raise Unavailable("the worker is stopping: retry", retry_after=self.retry_after) from None
        # cancelled before a thread took it (the request's deadline, its client gone): call() never runs, so its slot
        # is released here (a future only cancels while pending: never both)
        future.add_done_callback(lambda done: release() if done.cancelled() else None)
        return await asyncio.wrap_future(future)

    def stuck(self) -> int:
        """Threads running one call for longer than `stuck_after`."""
        now = time.monotonic()
        with self._lock:
            return sum(now - began > self.stuck_after for began in self._started.values())

    def health(self) -> dict[str, str]:
        """For /health/ready: nothing while no call has run past `stuck_after`."""
        stuck = self.stuck()
        if not stuck:
            return {}
        return {
            "user_code_threads": f"{stuck} of {self.size} threads have run user code for more than "
            f"{self.stuck_after:g} s: code that never returns keeps its thread; restart the worker to free them"
        }

    def _refusal(self) -> str:
        stuck = self.stuck()
        why = (
            f" ({stuck} of them for more than {self.stuck_after:g} s: user code that does not return)" if stuck else ""
        )
        return (
            f"all {self.size} threads for synchronous user code on this worker are busy{why}: retry, or raise "
            "SERVING_MAX_INFLIGHT or the workers"
        )


class TookTooLong(Exception):
    """`call_within`'s function did not return in time (it goes on, on its own thread)."""


def call_within(seconds: float, function: Callable[[], T], *, late: Callable[[T], None] | None = None) -> T:
    """`function()` on a daemon thread of its own, waited for at most `seconds` (TookTooLong past them). When it
    returns after that, `late(result)` gets what it returned (to release it). A daemon thread: a call that never
    returns does not keep the process from exiting either."""
    outcome: dict[str, Any] = {}
    lock = threading.Lock()
    done = threading.Event()

    def run() -> None:
        try:
            result = function()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc
        else:
            with lock:
                abandoned = outcome.get("abandoned", False)
                outcome["result"] = result
            if abandoned and late is not None:
                late(result)
        finally:
            done.set()

    threading.Thread(target=run, name="user-code-call", daemon=True).start()
    if not done.wait(seconds):
        with lock:
            if "result" not in outcome and "error" not in outcome:
                outcome["abandoned"] = True
                raise TookTooLong(f"did not finish in {seconds:g} s")
    done.wait()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
