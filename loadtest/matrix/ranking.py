"""How a matrix run ranks its configurations: by the highest open-loop rate whose p99 met the latency bound (the
search's `bound` rows; the closed loop's saturated rate where the run did not search), each the median over the
rounds with its min-max; an order claimed between neighbours only over at least `MIN_ROUNDS` interleaved rounds and
only where their ranges do not overlap; every ratio against the yardstick, the faster of the plain ensemble
(`stack = "minimal"`, `loadtest/minimal`) and the project's own (`stack = "triton"`), and no ratio at all when the
run lacks either: a ratio against the slower of the two would flatter whatever it divides."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from loadtest.matrix.measure import Measurement
from loadtest.matrix.summary import Summary, aggregate

MIN_ROUNDS = 3
YARDSTICK_STACKS = ("minimal", "triton")


def ranking_kind(measurements: list[Measurement]) -> str:
    """`bound` when the run searched under a latency bound, else `saturation` (the closed loop)."""
    return "bound" if any(m.kind == "bound" for m in measurements) else "saturation"


def ranked(measurements: list[Measurement]) -> list[Summary]:
    """Every configuration's ranking figure over its rounds, fastest median first. A round whose search met the
    bound at no rate counts as 0 req/s in the rate's median and range; the other figures (latency, goodput, CPU,
    batch) are the medians of the rounds that met it, where any did."""
    kind = ranking_kind(measurements)
    rows = [m for m in measurements if m.kind == kind]
    summaries = aggregate(rows)
    if kind == "bound":
        met = {s.label: s for s in aggregate([m for m in rows if m.throughput > 0])}
        for s in summaries:
            if s.label in met:
                figures = ("p50_ms", "p99_ms", "success", "goodput", "cpu_us_per_request", "batch_size")
                for name in (*figures, "front_cpu_us_per_request"):
                    setattr(s, name, getattr(met[s.label], name))
    return sorted(summaries, key=lambda s: -s.throughput)


@dataclass(frozen=True)
class Yardstick:
    summary: Summary | None
    """The faster ensemble; None when the run cannot say which is faster."""
    refusal: str = ""
    """Why there is no yardstick (and so no ratio)."""


def yardstick(summaries: list[Summary]) -> Yardstick:
    """The faster (by median) of the fastest plain ensemble and the fastest project ensemble of the run, both
    serving the model itself (a variant's rows are measured against it, never made it)."""
    best = {
        stack: max(
            (s for s in summaries if s.stack == stack and not s.variant), key=lambda s: s.throughput, default=None
        )
        for stack in YARDSTICK_STACKS
    }
    missing = [stack for stack, s in best.items() if s is None]
    if missing:
        return Yardstick(
            None,
            "No ratio: the yardstick is the faster of the plain ensemble (`minimal`) and the project's ensemble "
            f"(`triton`), and this run has no `{'` or `'.join(missing)}` configuration.",
        )
    faster = max((s for s in best.values() if s is not None), key=lambda s: s.throughput)
    if faster.throughput <= 0:
        return Yardstick(None, "No ratio: neither ensemble met the latency bound at any rate probed.")
    return Yardstick(faster)


def round_ratios(measurements: list[Measurement], label: str, against: str) -> list[float]:
    """`label`'s ranking figure over `against`'s in each round both ran and `against` served (interleaved: the
    same machine)."""
    kind = ranking_kind(measurements)
    by_round: dict[int, dict[str, float]] = {}
    for m in measurements:
        if m.kind == kind and m.label in (label, against):
            by_round.setdefault(m.round, {})[m.label] = m.throughput
    return [r[label] / r[against] for r in by_round.values() if len(r) == 2 and r[against] > 0]


def ratio_text(ratios: list[float]) -> str:
    """`0.93× (0.88-1.01)`, or the one round's ratio, or a dash."""
    if not ratios:
        return "-"
    median = statistics.median(ratios)
    return f"{median:.2f}×" + (f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else "")


def ordering(summaries: list[Summary]) -> str:
    """The order the run can claim, fastest first: `>` between neighbours whose ranges do not overlap, `≈` where
    they do; none with fewer than `MIN_ROUNDS` rounds (one round's figure has no range to judge by)."""
    rounds = min((s.rounds for s in summaries), default=0)
    if len(summaries) < 2:
        return ""
    if rounds < MIN_ROUNDS:
        return (
            f"No order claimed: {rounds} round(s); an order needs {MIN_ROUNDS} interleaved rounds whose ranges do "
            "not overlap (`make bench`)."
        )
    text = summaries[0].label
    for faster, slower in zip(summaries, summaries[1:], strict=False):
        text += (" > " if slower.high < faster.low else " ≈ ") + slower.label
    return f"Order (`>`: the ranges over {rounds} rounds do not overlap; `≈`: they do): {text}."
