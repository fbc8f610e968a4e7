"""The highest offered rate whose p99 latency stays under a bound, found by search: what MLPerf's server scenario and
Triton's `perf_analyzer --latency-threshold` report, and what the benchmark ranks configurations by.

`search` knows nothing about servers: it calls `probe(rate)`, which offers that rate open loop for a while and says
what came back (`Probe`). From a first guess it grows the rate until a probe misses the bound (or shrinks it until
one meets it), then bisects between the highest rate that met the bound and the lowest that missed it until the two
are within `precision` of each other or the probes run out. The answer is the highest rate that met the bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MIN_SUCCESS = 0.999
"""A probe meets the bound only if this share of its requests succeeded too (a server that sheds is not fast)."""


@dataclass
class Probe:
    """One open-loop attack at `rate` requests/s and what it measured."""

    rate: float
    p99_ms: float
    success: float
    goodput: float
    """Answers that succeeded within the bound, per second of the attack."""
    details: dict = field(default_factory=dict)
    """Whatever else the caller measured at this rate (CPU per request, batch size, p50), kept with the probe."""

    def meets(self, bound_ms: float) -> bool:
        return self.p99_ms <= bound_ms and self.success >= MIN_SUCCESS


@dataclass
class SearchResult:
    bound_ms: float
    probes: list[Probe]
    """Every probe, in the order it ran."""

    @property
    def best(self) -> Probe | None:
        """The highest-rate probe that met the bound; None when none did."""
        meeting = [p for p in self.probes if p.meets(self.bound_ms)]
        return max(meeting, key=lambda p: p.rate) if meeting else None


def search(
    probe: Callable[[float], Probe],
    bound_ms: float,
    start: float,
    *,
    probes: int = 8,
    precision: float = 0.05,
    step: float = 1.5,
    min_rate: float = 1.0,
) -> SearchResult:
    """Search the highest rate at which `probe(rate)` meets `bound_ms`, with at most `probes` calls, starting at
    `start` requests/s and moving by a factor `step` until the bound is bracketed, then bisecting until the rates that
    met and missed it are within `precision` (relative) of each other. Rates are rounded to 0.1 req/s and never go
    below `min_rate`."""
    if bound_ms <= 0 or probes < 1 or start <= 0 or step <= 1 or precision <= 0:
        raise ValueError("search needs bound_ms > 0, probes >= 1, start > 0, step > 1 and precision > 0")
    result = SearchResult(bound_ms, [])
    met: float | None = None
    missed: float | None = None
    rate = max(min_rate, round(start, 1))
    while len(result.probes) < probes:
        answer = probe(rate)
        result.probes.append(answer)
        if answer.meets(bound_ms):
            met = rate  # every probe after the first lies between the rates that met and missed so far
        else:
            missed = rate
        if missed is None:
            rate = round(rate * step, 1)
        elif met is None:
            if rate <= min_rate:
                break  # even the least rate misses the bound
            rate = max(min_rate, round(rate / step, 1))
        elif (missed - met) / met <= precision:
            break
        else:
            rate = round((met + missed) / 2, 1)
    return result
