"""`loadtest ab`'s report: for each model and configuration, HEAD/BASE of the saturated throughput and of the front's
CPU per request (median and min-max of the rounds' ratios, the verdict), beside each tree's medians; written to
report.md next to rounds.json (every round's figures) and printed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadtest.ab.compare import Comparison, median_of, ratio_text
from loadtest.ab.plan import BASE, HEAD

COLUMNS = (
    "| model | configuration | BASE req/s | HEAD req/s | HEAD/BASE req/s (min-max) | verdict "
    "| BASE front CPU µs/req | HEAD front CPU µs/req | HEAD/BASE CPU (min-max) | CPU verdict | others' CPUs (min-max) |"
)
_ALIGN = "|---|---|---:|---:|---:|---|---:|---:|---:|---|---:|"

RULE = (
    "Each round runs both trees back to back (which goes first alternates: A B, B A, ...), so the ratio of a round "
    "cancels what drifts slower than a pair. A verdict needs at least 2 rounds: `slower` when every round's "
    "HEAD/BASE throughput ratio is below 1 and the median's drop exceeds both the ratios' range (max - min) and "
    "{min_change:.0%}; `faster` the same above 1; else `no change`. The CPU verdict applies the same rule to the "
    "front's CPU per request (`more CPU` above 1). Front CPU: the processes that receive the requests (the "
    "gateway's for clearml, Triton's for the ensemble), per successful request. Others' CPUs: what processes "
    "other than the stack and the load generator used during the row's steps (median and min-max over both trees' "
    "rounds): the neighbours' load the ratios had to see through."
)


@dataclass
class Row:
    model: str
    config: str
    throughput: Comparison
    cpu: Comparison
    worst_success: float
    others: list[float]
    """CPUs other processes used during each of the row's steps."""


def _by_round(records: list[dict], tree: str, field: str) -> list[float | None]:
    ordered = sorted((r for r in records if r["tree"] == tree), key=lambda r: r["round"])
    return [r.get(field) for r in ordered]


def rows(records: list[dict]) -> list[Row]:
    """One row per (model, configuration), in the order they first ran; only rounds both trees finished count."""
    keys = list(dict.fromkeys((r["model"], r["config"]) for r in records))
    found = []
    for model, config in keys:
        mine = [r for r in records if (r["model"], r["config"]) == (model, config)]
        done = {r["round"] for r in mine if r["tree"] == HEAD} & {r["round"] for r in mine if r["tree"] == BASE}
        paired = [r for r in mine if r["round"] in done]
        throughput = Comparison(_by_round(paired, BASE, "throughput"), _by_round(paired, HEAD, "throughput"))
        cpu = Comparison(
            _by_round(paired, BASE, "front_cpu_us_per_request"),
            _by_round(paired, HEAD, "front_cpu_us_per_request"),
            higher_is_better=False,
        )
        success = min((r["success"] for r in mine), default=0.0)
        others = [r["cpus"]["others"] for r in mine if r.get("cpus")]
        found.append(Row(model, config, throughput, cpu, success, others))
    return found


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread_text(values: list[float]) -> str:
    """`1.2 (0.4-1.6)`: median and min-max, or `-`."""
    if not values:
        return "-"
    return f"{median_of(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def table(found: list[Row], min_change: float) -> str:
    lines = [COLUMNS, _ALIGN]
    for row in found:
        t, c = row.throughput, row.cpu
        lines.append(
            f"| {row.model} | {row.config} | {_number(median_of(t.base))} | {_number(median_of(t.head))} "
            f"| {ratio_text(t)} | {t.verdict(min_change)} | {_number(median_of(c.base), 0)} "
            f"| {_number(median_of(c.head), 0)} | {ratio_text(c)} | {c.verdict(min_change)} "
            f"| {_spread_text(row.others)} |"
        )
    return "\n".join(lines)


WHAT_RAN = (
    "What ran: Triton's encoder is a Python-backend model calling ONNX Runtime (the local tritonserver has no native "
    "onnxruntime backend; the container templates use the native one); the closed loop's rate is a client setting, "
    "not a batching stack's capacity, and no latency bound applies: these ratios compare two revisions, not stacks."
)


def markdown(meta: dict, records: list[dict], min_change: float) -> str:
    """report.md: what was raced on what, the table, the rule, and every round that was not all successes."""
    found = rows(records)
    lines = [
        f"# HEAD against BASE: {meta['head']} vs {meta['base']}",
        "",
        f"- HEAD: {meta['head']} in {meta['head_root']}",
        f"- BASE: {meta['base']} in {meta['base_root']} ({meta['base_env']})",
        f"- models: {'; '.join(meta['models'])}",
        f"- {meta['rounds']} round(s) of closed loop, {meta['concurrency']} concurrent requests, one `{meta['mix']}` "
        f"sentence each: {meta['warmup_seconds']:g} s warm-up, then {meta['duration']:g} s measured; "
        f"{meta['cpus']} CPUs, load average {meta['load']} at the start; {meta['date']}",
        f"- {WHAT_RAN}",
        "",
        table(found, min_change),
        "",
        RULE.format(min_change=min_change),
    ]
    failing = [r for r in records if r["success"] < 1.0]
    if failing:
        lines += ["", "Rounds with failed requests (their throughput counts successes only):", ""]
        lines += [
            f"- round {r['round']} {r['tree']} {r['model']} {r['config']}: {r['success']:.2%} success" for r in failing
        ]
    warned = [(r, note) for r in records for note in r.get("warnings", [])]
    if warned:
        lines += ["", "Generator warnings:", ""]
        lines += [f"- round {r['round']} {r['tree']} {r['model']} {r['config']}: {note}" for r, note in warned]
    return "\n".join(lines) + "\n"


def slower(records: list[dict], min_change: float) -> list[str]:
    """The rows whose throughput verdict is `slower`, as `model configuration`."""
    return [f"{r.model} {r.config}" for r in rows(records) if r.throughput.verdict(min_change) == "slower"]


def write_report(out: Path, meta: dict, records: list[dict], min_change: float) -> str:
    """report.md into OUT (rounds.json is already there); returns its text."""
    text = markdown(meta, records, min_change)
    (out / "report.md").write_text(text)
    return text
