"""Waiting for the spans still on their way: every service exports its spans in batches (the gateway's and the
FastAPI workers' SDK every 5 s, Triton every second, the load generator when its attack ends), so a store read right
after an attack lacks the last seconds' server spans. `settle` polls the store, bounded by a timeout, until every
trace of the requests made before it began has its spans, or nothing has arrived for longer than the slowest
exporter's interval. A trace whose every span ended that long before the wait began is not waited for: what it
misses is not on its way (an earlier run's trace that never got its parent span)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from services.analysis.store import Progress, SpanStore

EXPORT_INTERVAL_S = 5.0
"""The longest interval between two exports of any service of a stack (the OpenTelemetry SDK's batch span processor
default, `OTEL_BSP_SCHEDULE_DELAY`)."""
QUIET_S = EXPORT_INTERVAL_S + 1.0
"""No new span for this long: every exporter has sent what it held."""
RECENT_S = 120.0
"""Only spans that started this long before the wait are looked at: older ones have long been exported (and the
store's checks stay cheap however many spans it holds)."""


@dataclass(frozen=True)
class Waiting:
    """Where the wait stands, for a progress line."""

    seen: Progress
    quiet_s: float
    """Seconds since a span last arrived (or since the wait began, when none has arrived meanwhile)."""
    waited_s: float


@dataclass(frozen=True)
class Settled:
    settled: bool
    """False: the wait ended at its timeout with spans still arriving."""
    seen: Progress
    """The store's last look."""


def settle(
    store: SpanStore,
    since_ns: int = 0,
    *,
    timeout_s: float = 30.0,
    quiet_s: float = QUIET_S,
    poll_s: float = 0.5,
    report: Callable[[Waiting], None] = lambda waiting: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall: Callable[[], float] = time.time,
) -> Settled:
    """Wait for the spans of the requests made before the wait began (later ones, such as a liveness probe's, are
    not waited for): settled once no trace misses a span and nothing arrived over one poll, or once nothing arrived
    for `quiet_s` (a trace whose parent span will never come); unsettled at `timeout_s`. A store whose newest span
    ended `quiet_s` ago or longer is settled at once, and a trace none of whose spans ended within `quiet_s` before
    the wait began is never waited for. `report` hears after every poll that waits on."""
    started, until_ns = clock(), int(wall() * 1e9)
    since_ns = max(since_ns, until_ns - int(RECENT_S * 1e9))
    live_ns = until_ns - int(quiet_s * 1e9)
    seen = store.progress(since_ns, until_ns, live_ns)
    if seen.spans and wall() - seen.newest_end_ns / 1e9 >= quiet_s:
        return Settled(True, seen)
    last_change = started
    while True:
        now = clock()
        if now - last_change >= quiet_s:
            return Settled(True, seen)
        if now - started >= timeout_s:
            return Settled(False, seen)
        report(Waiting(seen, now - last_change, now - started))
        sleep(poll_s)
        found = store.progress(since_ns, until_ns, live_ns)
        if found.spans != seen.spans:
            last_change = clock()
        elif found.spans and not found.due:
            return Settled(True, found)
        seen = found
