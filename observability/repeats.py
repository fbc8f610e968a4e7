"""Lines a client can repeat at will, written a few at a time: a logging filter that lets through at most `burst`
lines of one kind per `interval` seconds, counts the rest, and says how many it left out in one line when the
interval is over.

A line is limited when it carries a `status` of 400 or more (a completion line, a refused connection): a client
chooses those, and one client on one keep-alive connection can send thousands a second. Its kind is its logger, its
message template (not the formatted message: the request's own values never make a new kind) and its `route` and
`status`; so the kinds are few and bounded, whatever the requests. Other lines pass untouched.

The left-out lines are counted, not lost from view: the summary line, "suppressed K similar lines", is written
through the same logger with the route and status, before the next line of any limited logger once the kind's
interval has passed. The access metrics (`serving_requests_total`) count every request either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LIMITED_STATUS = 400
NO_REQUEST = {"request_id": "-", "trace_id": "-"}
"""A summary is the line of no one request."""


@dataclass
class _Window:
    started: float
    written: int = 0
    suppressed: int = 0


class RepeatLimit(logging.Filter):
    """At most `burst` lines of one kind per `interval` seconds (see the module); one instance may guard several
    loggers."""

    def __init__(self, burst: int, interval: float, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        if burst < 1 or not interval > 0:
            raise ValueError(f"a repeat limit needs burst >= 1 and interval > 0, not {burst} and {interval}")
        self.burst, self.interval, self.clock = burst, interval, clock
        self.windows: dict[tuple, _Window] = {}
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "suppressed", None) is not None:
            return True  # a summary of ours
        now = self.clock()
        status = getattr(record, "status", None)
        limited = isinstance(status, int) and status >= LIMITED_STATUS
        with self.lock:
            due = self._due(now)
            passes = self._count(self._kind(record), now) if limited else True
        for kind, window in due:
            self._summarise(kind, window, now)
        return passes

    def _kind(self, record: logging.LogRecord) -> tuple:
        return record.name, str(record.msg), getattr(record, "route", "-"), getattr(record, "status", None)

    def _count(self, kind: tuple, now: float) -> bool:
        window = self.windows.get(kind)
        if window is None:
            window = self.windows[kind] = _Window(now)
        if window.written < self.burst:
            window.written += 1
            return True
        window.suppressed += 1
        return False

    def _due(self, now: float) -> list[tuple[tuple, _Window]]:
        """The windows whose interval has passed, removed; the ones that left lines out, returned to be said."""
        over = [kind for kind, window in self.windows.items() if now - window.started >= self.interval]
        ended = [(kind, self.windows.pop(kind)) for kind in over]
        return [(kind, window) for kind, window in ended if window.suppressed]

    def _summarise(self, kind: tuple, window: _Window, now: float) -> None:
        name, template, route, status = kind
        logger = logging.getLogger(name)
        summary = logger.makeRecord(
            name,
            logging.WARNING,
            __file__,
            0,
            "suppressed %d similar lines (route %s, status %d) in %.0f s after the first %d: %s",
            (window.suppressed, route, status, now - window.started, window.written, template),
            None,
            extra={"suppressed": window.suppressed, "route": route, "status": status} | NO_REQUEST,
        )
        logger.handle(summary)


def limit_repeats(limit: RepeatLimit, *loggers: logging.Logger) -> RepeatLimit:
    """Put `limit` on each of `loggers` (a line is counted by the logger it is written through), in place of a limit
    put there before (an app built again in the same process)."""
    for logger in loggers:
        for earlier in [f for f in logger.filters if isinstance(f, RepeatLimit)]:
            logger.removeFilter(earlier)
        logger.addFilter(limit)
    return limit
