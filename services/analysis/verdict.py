"""From many decomposed traces to an answer: per load level, each stage at p50/p90/p99 and its share of the total,
the stage that dominates the slowest requests, the stage that grows with load, and a verdict that names the knob."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from services.analysis.decompose import BEFORE, COALESCE_WAIT, INCOMPLETE, RIDING, Decomposition


@dataclass
class StageStats:
    name: str
    p50_ms: float
    p90_ms: float
    p99_ms: float
    """The percentiles over the traces the stage took time in (`seen`): a stage only some requests pass through
    (riding another request's batch) shows what it costs when it happens, not the 0 of the others."""
    mean_ms: float
    """Over every trace of the level, 0 where the stage took no time: what it adds to the mean end-to-end time."""
    share: float
    """Of the mean end-to-end time."""
    seen: float = 1.0
    """The share of the level's traces the stage took time in."""


@dataclass
class Level:
    name: str
    rate: float | None
    traces: int
    total_p50_ms: float
    total_p90_ms: float
    total_p99_ms: float
    stages: list[StageStats]
    dominant_stage: str
    """The stage with the largest share of the mean: where the time goes at this load."""
    slowest_stage: str
    """The stage with the largest share of the slowest 1% of traces (at least one trace): the p99's critical path."""
    slowest_share: float
    p99_trace: Decomposition
    typical_trace: Decomposition
    failed: dict[str, int] = field(default_factory=dict)
    """Traced requests that failed, by outcome ("timeout", "HTTP 429", ...): counted here, not in the stages."""
    clipped_ms: dict[str, float] = field(default_factory=dict)
    """Stage -> mean milliseconds its spans ran outside their parent's span (not counted in any stage)."""


@dataclass
class Analysis:
    levels: list[Level]
    growing_stage: str | None
    """The stage whose mean grew most from the lowest load level to the highest (None with one level)."""
    growth_ms: float
    verdict: str
    advice: str
    notes: list[str] = field(default_factory=list)

    @property
    def top(self) -> Level:
        """The highest load level (the most traces among equals): where the verdict is decided."""
        return top_level(self.levels)


def top_level(levels: list[Level]) -> Level:
    return max(levels, key=lambda lv: (lv.rate or 0.0, lv.traces))


def _level(name: str, rate: float | None, items: list[Decomposition]) -> Level | None:
    """One load level's statistics over its complete traces; None when every traced request of it failed."""
    traces = [t for t in items if t.ok]
    failed = dict(Counter(t.outcome for t in items if not t.ok).most_common())
    if not traces:
        return None
    totals = np.array([t.total_ms for t in traces])
    names = list(dict.fromkeys(s for t in traces for s in t.stages))
    mean_total = float(totals.mean())
    stages = []
    for stage in names:
        values = np.array([t.stages.get(stage, 0.0) for t in traces])
        taken = values[values > 0]
        p50, p90, p99 = np.percentile(taken, [50, 90, 99]) if taken.size else (0.0, 0.0, 0.0)
        mean = float(values.mean())
        stages.append(StageStats(stage, p50, p90, p99, mean, mean / mean_total, taken.size / len(traces)))
    cut = np.percentile(totals, 99)
    slow = [t for t in traces if t.total_ms >= cut] or traces
    slow_share = {s: float(np.mean([t.stages.get(s, 0.0) / t.total_ms for t in slow if t.total_ms])) for s in names}
    slowest = max(slow_share, key=slow_share.__getitem__)
    order = np.argsort(totals)
    typical = traces[int(order[len(order) // 2])]
    p99_trace = traces[int(order[min(len(order) - 1, int(0.99 * len(order)))])]
    p50, p90, p99 = np.percentile(totals, [50, 90, 99])
    dominant = max(stages, key=lambda s: s.share).name
    clipped = {
        s: sum(t.clipped.get(s, 0.0) for t in traces) / len(traces) for s in {k for t in traces for k in t.clipped}
    }
    return Level(
        name,
        rate,
        len(traces),
        p50,
        p90,
        p99,
        stages,
        dominant,
        slowest,
        slow_share[slowest],
        p99_trace,
        typical,
        failed,
        dict(sorted(clipped.items(), key=lambda kv: -kv[1])),
    )


def failure_note(name: str, items: list[Decomposition]) -> str | None:
    """How many traced requests of a level failed, roughly how many in the whole run (the generator's client spans
    carry the share it traced), and how many traces arrived without their server spans."""
    failed = Counter(t.outcome for t in items if not t.ok and t.outcome != INCOMPLETE)
    incomplete = sum(t.outcome == INCOMPLETE for t in items)
    notes = []
    if failed:
        count = sum(failed.values())
        kinds = ", ".join(f"{outcome}: {n}" for outcome, n in failed.most_common())
        notes.append(f"{count} of {len(items)} traced requests failed ({kinds}); they are not in the stage statistics")
        ratio = next(
            (t.attributes["loadtest.trace_ratio"] for t in items if t.attributes.get("loadtest.trace_ratio")), 0
        )
        if 0 < float(ratio) < 1:
            notes[-1] += (
                f"; with {float(ratio):.0%} of requests traced, about {count / float(ratio):.0f} in the whole run"
            )
    if incomplete:
        notes.append(f"{incomplete} answered requests have no server spans in the store (lost or not yet exported)")
    return f"{name}: " + "; ".join(notes) if notes else None


def group_levels(traces: list[Decomposition]) -> list[tuple[str, float | None, list[Decomposition]]]:
    """By the load generator's offered rate (its client spans carry it); traces without one form a single level.
    When some traces have the generator's client span, only those count: they have the whole path."""
    if any(t.attributes for t in traces):
        traces = [t for t in traces if t.attributes]
    groups: dict[tuple, list[Decomposition]] = defaultdict(list)
    for t in traces:
        rate = t.attributes.get("loadtest.rate")
        key = (float(rate) if rate not in (None, "") else None,) + tuple(
            str(t.attributes.get(f"loadtest.{name}", "")) for name in ("attack", "concurrency", "mix")
        )
        groups[key].append(t)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0.0, kv[0][1:]))
    return [(level_name(*key), key[0], items) for key, items in ordered]


def level_name(rate: float | None, attack: str = "", concurrency: str = "", mix: str = "") -> str:
    """A load level in words: "closed loop (32 concurrent requests; payload mix 'short')", "open loop at 100 req/s",
    prefixed with the configuration a matrix measured ("clearml-w1-on: closed loop")."""
    if rate is None:
        return "all traces (no load generator's spans)"
    if rate == 0:
        name = "closed loop"
        details = [f"{concurrency} concurrent requests"] if concurrency else []
    else:
        name, details = f"open loop at {rate:g} req/s", []
    details += [f"payload mix '{mix}'"] if mix else []
    name += f" ({'; '.join(details)})" if details else ""
    return f"{attack}: {name}" if attack else name


def advise(stage: str) -> tuple[str, str]:
    """The verdict and the knob for a dominating stage."""
    lowered = stage.lower()
    if stage == BEFORE:
        return (
            "requests wait before any handler runs: the front's workers (or the network) are saturated",
            "raise WORKERS (front worker processes), or put fewer requests on this host",
        )
    if lowered.startswith("tokenizer queue"):
        return (
            "the ensemble's tokenizer instance is the bottleneck (the study's claim): requests queue for the "
            "Python-backend tokenizer while the encoder waits",
            "raise the tokenizer's instance_group count, or tokenize in gateway workers (STACK=clearml WORKERS=N)",
        )
    if lowered.endswith(" queue"):
        model = stage[: -len(" queue")]
        return (
            f"requests queue in Triton for the {model} model: its instances are busy",
            f"raise the {model} instance_group count if CPUs/GPUs are idle; with small batches raise "
            "max_queue_delay_microseconds (dynamic_batching) so each execution serves more requests",
        )
    if lowered.endswith(" infer") or stage == "inference (in-process)":
        return (
            "the model's forward pass dominates: the server is compute-bound, serving overhead is not the issue",
            "faster hardware (GPU: the encoder's CUDA provider), a smaller or quantized model, or shorter inputs",
        )
    if stage in ("preprocessing (front)", "JSON parse", "HTTP handling (front)", "postprocess + serialisation"):
        return (
            f"the front's own work ({stage}) dominates: gateway/front workers spend the time, not the model",
            "raise WORKERS (preprocessing scales with front processes), or make the preprocess code cheaper",
        )
    if stage in (COALESCE_WAIT, RIDING):
        return (
            "requests wait for their worker's batches to come back from the backend: the backend is the limit",
            "look at the batch carriers' traces (Triton's queue and compute); more Triton instances, or a GPU",
        )
    if stage == "gRPC client + transfer":
        return (
            "the hop between the gateway and Triton dominates (gRPC client, serialisation, transfer)",
            "send fewer, larger requests (several texts per request), or co-locate gateway and Triton",
        )
    if stage.startswith("ensemble hand-offs"):
        return (
            "the ensemble's scheduling between its steps dominates",
            "fewer ensemble steps (tokenize in the front: STACK=clearml)",
        )
    return (f"{stage} dominates", "look at the waterfall of the p99 trace")


def analyze(traces: list[Decomposition]) -> Analysis:
    grouped = group_levels(traces)
    notes = [note for name, _, items in grouped if (note := failure_note(name, items))]
    levels = [level for name, rate, items in grouped if (level := _level(name, rate, items))]
    if not levels:
        why = "; ".join(notes) or "were the services started with tracing (TRACES=1)?"
        raise ValueError(f"no complete traces to analyze: {why}")
    growing, growth = None, 0.0
    rated = [lv for lv in levels if lv.rate]
    if len(rated) >= 2:
        low, high = rated[0], rated[-1]
        low_means = {s.name: s.mean_ms for s in low.stages}
        deltas = {s.name: s.mean_ms - low_means.get(s.name, 0.0) for s in high.stages}
        growing = max(deltas, key=deltas.__getitem__)
        growth = deltas[growing]
    top = top_level(levels)
    deciding = growing if growing and growth > 0.2 * top.total_p50_ms else top.dominant_stage
    verdict, advice = advise(deciding)
    if top.slowest_stage != deciding:
        notes.append(f"at {top.name} the slowest 1% of requests are dominated by {top.slowest_stage} instead")
    for stage, ms in list(top.clipped_ms.items())[:1]:
        notes.append(
            f"at {top.name}, {stage} ran {ms:.2f} ms (mean) outside its parent span (Triton's spans go on after "
            "the response has left): that time is in no stage, so the stages add up to the end-to-end time"
        )
    for lv in levels:
        if lv.traces < 20:
            notes.append(f"{lv.name}: only {lv.traces} traces; percentiles are rough")
    return Analysis(levels, growing, growth, f"{deciding}: {verdict}", advice, notes)
