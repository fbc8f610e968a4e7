"""The gateway's goals, checked on every matrix run that has a gateway and both ensembles in it: its ranking figure
(the highest rate under the latency bound; the closed loop's saturated rate where the run did not search) over the
yardstick's, the faster of the plain and the project's ensemble (`loadtest.matrix.ranking`), round by round; the
fastest configuration's share of raw ONNX Runtime's rate; and the gateway's efficiency (raw ONNX Runtime's CPU per
sequence at the batch it formed over its CPU per request). The figures are printed and written into report.md, met
or not; nothing fails on them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from loadtest.matrix.measure import Measurement
from loadtest.matrix.ranking import ranked, ranking_kind, round_ratios, yardstick
from loadtest.matrix.summary import Summary, efficiency

OVER_YARDSTICK = {"tiny-bert": 0.90}
"""The gateway's figure over the yardstick's, by model: on the tiny model (the overhead regime, where the servers' own
costs dominate) at least 0.9×, on any other model at least `OVER_YARDSTICK_DEFAULT`."""
OVER_YARDSTICK_DEFAULT = 1.00
OF_CEILING = 0.85
"""The fastest configuration's figure over raw ONNX Runtime's best rate (no server, same cores, same run)."""
EFFICIENCY = 0.90
OVER_MODEL = {"int8": 2.0}
"""A variant's fastest configuration over the fastest serving the model itself, at the same latency bound."""


@dataclass(frozen=True)
class Goal:
    what: str
    target: str
    measured: str
    met: bool

    def row(self) -> str:
        return f"| {self.what} | {self.target} | {self.measured} | {'met' if self.met else 'not met'} |"


def gateway_goals(measurements: list[Measurement], saturated: list[Summary], ceiling: dict, model: str) -> list[Goal]:
    """The goals of the gateway with the highest median figure, serving the model itself; none without a gateway,
    none against a yardstick the run cannot name (`ranking.yardstick`), no ratio without a round where both ran and
    the yardstick served, no efficiency without the model's CPU at the gateway's batch (a closed-loop figure:
    `saturated`)."""
    summaries = [s for s in ranked(measurements) if not s.variant]
    gateways = [s for s in summaries if s.stack == "clearml"]
    stick = yardstick(summaries)
    if not gateways or stick.summary is None:
        return []
    best = gateways[0]
    figure = "req/s at the latency bound" if ranking_kind(measurements) == "bound" else "closed-loop req/s"
    goals = []
    ratios = round_ratios(measurements, best.label, stick.summary.label)
    if ratios:
        target = OVER_YARDSTICK.get(model, OVER_YARDSTICK_DEFAULT)
        median = statistics.median(ratios)
        rounds = max(m.round for m in measurements)
        spread = f" ({min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} of {rounds} rounds)" if rounds > 1 else ""
        what = f"{best.label} ÷ {stick.summary.label} (the faster ensemble), {figure} ({model})"
        goals.append(Goal(what, f"≥ {target:.2f}×", f"{median:.2f}×{spread}", round(median, 2) >= target))
    if ceiling.get("rate"):
        share = summaries[0].throughput / ceiling["rate"]
        reference = "the simulated device" if ceiling.get("device") == "sim" else "raw ONNX Runtime"
        what = f"{summaries[0].label} (the fastest) ÷ {reference}, {figure}"
        goals.append(Goal(what, f"≥ {OF_CEILING:.2f}×", f"{share:.2f}×", round(share, 2) >= OF_CEILING))
    closed = next((s for s in saturated if s.label == best.label), None)
    share = efficiency(closed, ceiling) if closed else None
    if share is not None:
        what = f"{best.label} efficiency (closed loop)"
        goals.append(Goal(what, f"≥ {EFFICIENCY:.0%}", f"{share:.0%}", round(share, 2) >= EFFICIENCY))
    return goals


def variant_goals(measurements: list[Measurement], quality: dict[str, dict]) -> list[Goal]:
    """For each variant in the run: its fastest configuration's figure over the fastest configuration serving the
    model itself, round by round (at least `OVER_MODEL[variant]`), and the quality its build measured against the
    model (`quality`: a variant's quality.json by name; the gate the build applied)."""
    summaries = ranked(measurements)
    source = next((s for s in summaries if not s.variant), None)
    goals = []
    for variant in dict.fromkeys(s.variant for s in summaries if s.variant):
        best = next(s for s in summaries if s.variant == variant)
        ratios = round_ratios(measurements, best.label, source.label) if source else []
        if ratios and source is not None:
            target = OVER_MODEL.get(variant, 1.0)
            median = statistics.median(ratios)
            spread = f" ({min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} rounds)" if len(ratios) > 1 else ""
            what = f"{best.label} (the fastest {variant}) ÷ {source.label} (the fastest fp32)"
            goals.append(Goal(what, f"≥ {target:.2f}×", f"{median:.2f}×{spread}", round(median, 2) >= target))
        report = quality.get(variant)
        if report:
            gate = report.get("gate", {})
            for name, bound in (("mean_cosine", "min_mean_cosine"), ("topk_agreement", "min_topk_agreement")):
                if report.get(name) is not None and gate.get(bound) is not None:
                    what = f"{variant} {name.replace('_', ' ')} to the model ({report.get('texts')} held-out texts)"
                    met = report[name] >= gate[bound]
                    goals.append(Goal(what, f"≥ {gate[bound]:g}", f"{report[name]:.4f}", met))
    return goals


def goals_section(goals: list[Goal]) -> list[str]:
    if not goals:
        return []
    return ["## Goals", "", "| goal | target | measured | |", "|---|---|---|---|", *(g.row() for g in goals), ""]
