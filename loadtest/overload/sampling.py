"""What the overload and the soak measure: the stack's resident memory sampled while an attack runs, and the
figures taken from the results (goodput, percentiles of the admitted requests, recovery time, a timeline)."""

from __future__ import annotations

import threading
import time

import numpy as np

from loadtest.overload.config import SHED_CODES
from loadtest.report import hdr_percentiles
from loadtest.results import Result
from loadtest.stackrun import RunningStack


class MemorySampler:
    """Samples the stack's resident memory (and the time) in a thread while an attack runs, and once more when
    it ends."""

    def __init__(self, stack: RunningStack, every: float = 1.0):
        self.stack, self.every = stack, every
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self.stack.rss()))
            self._stop.wait(self.every)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self.stack.rss()))

    def at(self, when: float) -> dict[str, int]:
        """The first sample at or after `when` (the last one if none)."""
        return next((rss for stamp, rss in self.samples if stamp >= when), self.samples[-1][1])


def is_ok(result: Result) -> bool:
    return 200 <= result.code < 300


def percentile_ms(results: list[Result], q: float) -> float:
    """The q-th percentile of the results' latencies in ms, from the reports' HDR histogram (NaN without results)."""
    if not results:
        return float("nan")
    return hdr_percentiles(np.array([r.latency for r in results], dtype=np.int64), (q,))[f"{q:g}"] / 1e6


def saturated_rate(results: list[Result], seconds: float) -> float:
    """2xx per second over a closed loop of `seconds`."""
    return sum(1 for r in results if is_ok(r)) / seconds


def recovery_time(results: list[Result], attack_end: float, rate: float, window: float = 1.0) -> float | None:
    """Seconds from the attack's end until a `window` of completions first reaches 90% of `rate`: the end of
    that window (None: it never did)."""
    ends = np.sort([r.timestamp + r.latency / 1e9 for r in results if is_ok(r)])
    need = int(np.ceil(0.9 * rate * window))
    if len(ends) < need or need == 0:
        return None
    # the window [ends[i] - window, ends[i]] holds ends[j..i]: first i where i - j + 1 >= need
    for i in range(need - 1, len(ends)):
        if ends[i] - ends[i - need + 1] <= window:
            return max(0.0, float(ends[i] - attack_end))
    return None


def rss_growth(settled: dict[str, int], end: dict[str, int]) -> float:
    """The largest relative growth of one process present at both times."""
    growth = [(end[k] - settled[k]) / settled[k] for k in settled.keys() & end.keys() if settled[k]]
    return max(growth, default=0.0)


def timeline(results: list[Result], start: float, bin_seconds: float, memory: MemorySampler) -> list[dict]:
    """Per bin of due times: 2xx/s, shed/s, other errors/s, p50/p99 of the admitted, total resident memory (MB)
    at the bin's end. A final bin whose middle no request reached is left out: it would read as a drop."""
    bins: dict[int, list[Result]] = {}
    for r in results:
        bins.setdefault(int((r.timestamp - start) // bin_seconds), []).append(r)
    last = max((r.timestamp for r in results), default=start)
    rows = []
    for index in sorted(bins):
        if start + (index + 0.5) * bin_seconds > last and index:
            continue
        chunk = bins[index]
        ok = [r for r in chunk if is_ok(r)]
        shed = sum(1 for r in chunk if r.code in SHED_CODES)
        rss = memory.at(start + (index + 1) * bin_seconds)
        rows.append(
            {
                "t": index * bin_seconds,
                "ok_per_s": len(ok) / bin_seconds,
                "shed_per_s": shed / bin_seconds,
                "errors_per_s": (len(chunk) - len(ok) - shed) / bin_seconds,
                "p50_ms": percentile_ms(ok, 50),
                "p99_ms": percentile_ms(ok, 99),
                "rss_mb": sum(rss.values()) / 2**20,
            }
        )
    return rows
