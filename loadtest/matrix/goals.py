"""The gateway's goals, checked on every matrix run that has the minimal ensemble and a gateway in it: its saturated
throughput over the minimal Triton ensemble's, round by round, and its efficiency (raw ONNX Runtime's CPU per
sequence at the batch it formed over its CPU per request). The figures are printed and written into report.md, met
or not; nothing fails on them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from loadtest.matrix.measure import Measurement
from loadtest.matrix.summary import Summary, efficiency

OVER_MINIMAL = {"tiny-bert": 1.30}
"""The gateway's throughput over the minimal ensemble's, by model: the tiny model (the overhead regime, where the
servers' own costs dominate) asks more than any other model, which asks `OVER_MINIMAL_DEFAULT`."""
OVER_MINIMAL_DEFAULT = 1.15
EFFICIENCY = 0.90


@dataclass(frozen=True)
class Goal:
    what: str
    target: str
    measured: str
    met: bool

    def row(self) -> str:
        return f"| {self.what} | {self.target} | {self.measured} | {'met' if self.met else 'not met'} |"


def gateway_goals(measurements: list[Measurement], saturated: list[Summary], ceiling: dict, model: str) -> list[Goal]:
    """The goals of the gateway with the highest median throughput; none without a gateway or the minimal ensemble,
    no ratio without a round where both ran and the minimal ensemble served (no efficiency without the model's CPU
    at the gateway's batch)."""
    gateways = [s for s in saturated if s.stack == "clearml"]
    minimal = next((s for s in saturated if s.stack == "minimal"), None)
    if not gateways or minimal is None:
        return []
    best = max(gateways, key=lambda s: s.throughput)
    ratios = _round_ratios(measurements, best.label, minimal.label)
    target = OVER_MINIMAL.get(model, OVER_MINIMAL_DEFAULT)
    goals = []
    if ratios:
        median = statistics.median(ratios)
        rounds = max(m.round for m in measurements)
        spread = f" ({min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} of {rounds} rounds)" if rounds > 1 else ""
        what = f"{best.label} ÷ minimal ensemble, saturated req/s ({model})"
        goals.append(Goal(what, f"≥ {target:.2f}×", f"{median:.2f}×{spread}", round(median, 2) >= target))
    share = efficiency(best, ceiling)
    if share is not None:
        goals.append(
            Goal(f"{best.label} efficiency", f"≥ {EFFICIENCY:.0%}", f"{share:.0%}", round(share, 2) >= EFFICIENCY)
        )
    return goals


def _round_ratios(measurements: list[Measurement], gateway: str, minimal: str) -> list[float]:
    """The gateway's throughput over the minimal ensemble's in each round both ran (interleaved: the same machine)."""
    by_round: dict[int, dict[str, float]] = {}
    for m in measurements:
        if m.kind == "saturation" and m.label in (gateway, minimal):
            by_round.setdefault(m.round, {})[m.label] = m.throughput
    return [r[gateway] / r[minimal] for r in by_round.values() if len(r) == 2 and r[minimal] > 0]


def goals_section(goals: list[Goal]) -> list[str]:
    if not goals:
        return []
    return ["## Goals", "", "| goal | target | measured | |", "|---|---|---|---|", *(g.row() for g in goals), ""]
