"""In-process tallies of the per-request metrics, added to their Prometheus series in one write per series.

A multiprocess sample write (`prometheus_client` multiprocess mode) is a locked write into a memory-mapped file, and a
served request made about 18 of them. Here a request adds to plain numbers instead: a counter's or gauge's amount, a
histogram's sum and its bucket counts (found by bisection, as `Histogram.observe` finds them by a loop). `flush` adds
what was tallied to the series, so each series takes one write however many requests fed it.

Flushes happen whenever the edge finds its worker idle (`services.api.edge`), every `INTERVAL` seconds while it
stays busy (`flush_while`, a task of the app's lifespan), before `/metrics` is rendered (`metrics.metrics_payload`)
and before the default registry is read in the process (`Flusher`, registered ahead of the tallied metrics): a read
in the worker itself is exact, another worker's series are at most `INTERVAL` seconds behind while it is busy.
"""

from __future__ import annotations

import asyncio
import threading
from bisect import bisect_left
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

INTERVAL = 0.5
"""Seconds between two flushes while a worker has requests in flight."""


class _Pending:
    """A histogram's observations not yet written: their sum and their count per bucket."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: list[float]):
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0


class Tally:
    """Amounts and observations per series (a metric's child), thread-safe; `flush` writes them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._amounts: dict = {}
        self._histograms: dict = {}

    def inc(self, series: Counter | Gauge, amount: float = 1.0) -> None:
        """`series.inc(amount)` at the next flush (a counter's child, or a gauge's: `amount` may then be negative)."""
        with self._lock:
            self._amounts[series] = self._amounts.get(series, 0.0) + amount

    def observe(self, histogram: Histogram, value: float) -> None:
        """`histogram.observe(value)` at the next flush (a histogram's child)."""
        with self._lock:
            pending = self._histograms.get(histogram)
            if pending is None:
                pending = self._histograms[histogram] = _Pending(histogram._upper_bounds)
            pending.total += value
            if value == value:  # NaN falls in no bucket, as with observe()
                pending.counts[bisect_left(pending.bounds, value)] += 1

    def observe_many(self, histogram: Histogram, values: Iterable[float]) -> None:
        """`observe` of each of `values`, under one lock."""
        with self._lock:
            pending = self._histograms.get(histogram)
            if pending is None:
                pending = self._histograms[histogram] = _Pending(histogram._upper_bounds)
            bounds, counts = pending.bounds, pending.counts
            for value in values:
                pending.total += value
                if value == value:
                    counts[bisect_left(bounds, value)] += 1

    def flush(self) -> None:
        """Write everything tallied since the last flush into its series."""
        with self._lock:
            if not self._amounts and not self._histograms:
                return
            amounts, self._amounts = self._amounts, {}
            histograms, self._histograms = self._histograms, {}
            for series, amount in amounts.items():
                if amount:
                    series.inc(amount)
            for histogram, pending in histograms.items():
                histogram._sum.inc(pending.total)
                for index, count in enumerate(pending.counts):
                    if count:
                        histogram._buckets[index].inc(count)


TALLY = Tally()
"""The process's tally of the per-request metrics (`observability.metrics`)."""


class Flusher:
    """A collector that yields nothing and flushes the tally: registered ahead of the tallied metrics, it runs
    before they are read from the registry."""

    def collect(self):
        TALLY.flush()
        return []


async def flush_while(interval: float = INTERVAL) -> None:
    """Flush the tally every `interval` seconds until cancelled."""
    while True:
        await asyncio.sleep(interval)
        TALLY.flush()
