"""An asyncio event loop on a virtual clock, for tests of timers (read deadlines, keep-alive) that a busy machine must
not move: the clock stands still while callbacks run, and when nothing is ready it jumps to the next timer instead of
waiting for it. A test's `asyncio.sleep(0.03)` then lasts exactly 0.03 s of the loop's time however long the machine
took to run the code in between.

Only for code that lives on the loop alone: work on other threads (`asyncio.to_thread`, executors) or real sockets
take real time that the clock does not see, so a timer may fire before they finish. (looptime does this too, but its
pytest plugin is built around pytest-asyncio, which this project does not use.)
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without waiting; when nothing is ready and the loop would wait for a timer, moves the clock to it."""

    def __init__(self, loop: VirtualClockLoop):
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None):
        ready = super().select(None if timeout is None else 0)
        if not ready and timeout:
            self.loop.now += timeout
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self):
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a `VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(coroutine)
