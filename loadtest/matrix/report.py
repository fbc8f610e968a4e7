"""What a matrix run leaves in results/<run-id>/: summary.json and summary.csv (every measurement), machine.json,
the charts (ranking.png, throughput.png, latency.png) and report.md, all from the measurements, so `loadtest plot`
can redraw them from summary.json."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

from loadtest.ceiling import ceiling_name
from loadtest.matrix.config import MatrixConfig
from loadtest.matrix.goals import gateway_goals, goals_section, variant_goals
from loadtest.matrix.measure import Measurement
from loadtest.matrix.ranking import ordering, ranked, ratio_text, round_ratios, yardstick
from loadtest.matrix.summary import Summary, aggregate, model_cpu
from loadtest.matrix.traces import analysis_section

SPREAD_FLAG = 0.10
"""A configuration whose throughput's min-max over its rounds exceeds this share of its median is flagged."""

COLUMNS = (
    "| configuration | saturated req/s | min-max | x ceiling | p50 ms | p99 ms | success | server CPU us/req "
    "| front CPU us/req | batch | ORT CPU us/seq at that batch | efficiency | settings |"
)
_ALIGN = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"

NOTES = (
    "Server CPU: every process of the stack (load generator excluded); front: the processes that "
    "receive the requests (the gateway for clearml, everything outside Triton). Batch: the mean batch Triton's "
    "encoder executed at saturation (1 for in-process ONNX Runtime); efficiency: raw ONNX Runtime's CPU per "
    "sequence at that batch size (tokenization included, no server; measured with the ceiling at batch 1 to 64 "
    "before and after each round, the two around a configuration's round averaged, interpolated) over the "
    "stack's CPU per request: 100% would be a server that costs nothing beyond the model; above 100%, the "
    "machine was faster during that configuration than around it."
)


RANKING_COLUMNS = (
    "| configuration | req/s at the bound | min-max | × yardstick | goodput/s | p50 ms | p99 ms | server CPU us/req "
    "| batch | closed loop req/s (secondary) | settings |"
)
_RANKING_ALIGN = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"


def caveats(config: MatrixConfig, bound_ms: float | None, sim: bool) -> str:
    """What ran, said beside every table: where the encoder ran and how, which loop, which bound."""
    encoder = (
        "every encoder ran on the simulated accelerator (no CPU for the model)"
        if sim
        else "Triton's encoder (triton, clearml and minimal stacks) is a Python-backend model calling ONNX Runtime, "
        "because the local tritonserver (the nvidia-pytriton wheel) has no native onnxruntime backend; the "
        "container templates use the native backend, whose costs differ, so a Triton deployment's figures will not "
        "be these"
    )
    loops = (
        f"ranked open loop (requests due on a schedule, latency from the due time) by the highest rate whose p99 "
        f"stayed within {bound_ms:g} ms; "
        if bound_ms
        else ""
    )
    variants = ", ".join(dict.fromkeys(run.variant for run in config.runs() if run.variant))
    if variants:
        loops += f"rows marked {variants} serve `serving model optimize`'s variant of the model (its quality: Goals); "
    if any(run.protocol == "grpc" for run in config.runs()):
        loops += "rows marked grpc send the load over the gateway's gRPC edge (ModelInfer, one connection a process); "
    return (
        f"**What ran**: {encoder}; {loops}the closed-loop figure is {config.concurrency} concurrent requests "
        "(a client setting, not a batching stack's capacity)."
    )


SIM_NOTE = [
    "",
    "Every encoder ran on the simulated accelerator (`DEVICE=sim`): one device shared by the stack, each batch "
    "waiting its modelled device time without using a core; tokenizing, HTTP, batching and IPC ran for real. The "
    "ceiling is that device alone fed by an in-process tokenizer, and its CPU per sequence (the efficiency "
    "column's reference) is tokenizing and handing batches over.",
]


def write_outputs(
    out: Path,
    measurements: list[Measurement],
    ceiling: dict,
    info: dict,
    config: MatrixConfig,
    analyses: dict | None = None,
) -> None:
    """Every output of a run into OUT (overwriting what is there)."""
    write_data(out, measurements, ceiling, info, analyses)
    from loadtest.plots import latency_chart, throughput_chart

    saturated = aggregate([m for m in measurements if m.kind == "saturation"])
    label = "simulated device ceiling" if ceiling.get("device") == "sim" else "raw ONNX Runtime ceiling"
    throughput_chart(saturated, ceiling["rate"], out / "throughput.png", label)
    bound = aggregate([m for m in measurements if m.kind == "bound"])
    if bound:
        bound_ms = _bound_ms(measurements)
        ylabel = f"requests/s with p99 <= {bound_ms:g} ms (open loop)"
        throughput_chart(bound, ceiling["rate"], out / "ranking.png", label, ylabel)
    load = [m for m in measurements if m.kind == "load"]
    if load:
        latency_chart(load, out / "latency.png")
    (out / "report.md").write_text(markdown(out.name, measurements, ceiling, info, config, analyses))


def write_data(out: Path, measurements: list[Measurement], ceiling: dict, info: dict, analyses: dict | None) -> None:
    """summary.json (what `replot` reads back), machine.json, and summary.csv (without the warnings)."""
    rows = [asdict(m) | {"label": m.label} for m in measurements]
    summary = {"ceiling": ceiling, "measurements": rows, "analyses": analyses or {}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "machine.json").write_text(json.dumps(info, indent=2))
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[k for k in rows[0] if k != "warnings"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def markdown(
    name: str,
    measurements: list[Measurement],
    ceiling: dict,
    info: dict,
    config: MatrixConfig,
    analyses: dict | None = None,
) -> str:
    """report.md: how the run was made, the saturation table (fastest first), the notes, the charts, the traced
    configurations' analyses and every warning."""
    saturated = aggregate([m for m in measurements if m.kind == "saturation"])
    bound_ms = _bound_ms(measurements)
    lines = [f"# Benchmark {name}", "", *_method(saturated, ceiling, info, config), ""]
    lines += _ranking(measurements, saturated, bound_ms, caveats(config, bound_ms, ceiling.get("device") == "sim"))
    lines += [
        "## Closed loop" + (" (secondary)" if bound_ms else ""),
        "",
        caveats(config, bound_ms, ceiling.get("device") == "sim"),
        "",
        COLUMNS,
        _ALIGN,
    ]
    lines += [_row(m, ceiling) for m in sorted(saturated, key=lambda m: -m.throughput)]
    flagged = [m for m in saturated if m.spread > SPREAD_FLAG]
    if flagged:
        lines += [
            "",
            f"Spread over {SPREAD_FLAG:.0%} between rounds (the machine was noisy; compare these with care): "
            + ", ".join(f"{m.label} ({m.spread:.0%})" for m in flagged)
            + ".",
        ]
    lines += ["", NOTES, ""]
    goals = gateway_goals(measurements, saturated, ceiling, info.get("model", ""))
    lines += goals_section(goals + variant_goals(measurements, info.get("variants", {})))
    lines += [f"Left out: {why}" for why in info.get("left_out", [])] + ([""] if info.get("left_out") else [])
    lines += ["![throughput](throughput.png)", ""]
    if any(m.kind == "load" for m in measurements):
        lines += [
            "Latency versus offered load (open loop, latency from each request's scheduled time):",
            "",
            "![latency](latency.png)",
            "",
        ]
    if analyses:
        lines += analysis_section(analyses)
    warned = [m for m in measurements if m.warnings]
    if warned:
        lines += ["Warnings:", ""] + [
            f"- {m.label} at {m.offered_rate or 0:g} req/s: {w}" for m in warned for w in m.warnings
        ]
    return "\n".join(lines) + "\n"


def headline(report: str) -> str:
    """The part of a report.md that `loadtest matrix` and `loadtest bench` print at their end: the ranking section
    (or, for a run without a bound, the closed-loop table), up to its chart."""
    lines = report.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("## Ranking")), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if line.startswith("## Closed loop")), len(lines))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("## ", "![", NOTES[:40]))), len(lines))
    return "\n".join(lines[start:end]).strip()


def _bound_ms(measurements: list[Measurement]) -> float | None:
    return next((m.latency_bound_ms for m in measurements if m.kind == "bound"), None)


def _ranking(
    measurements: list[Measurement], saturated: list[Summary], bound_ms: float | None, what_ran: str
) -> list[str]:
    """The ranking section: every configuration's rate at the bound, the yardstick and the ratios against it (or
    why none), the order the rounds allow, the chart."""
    if bound_ms is None:
        return []
    summaries = ranked(measurements)
    stick = yardstick(summaries)
    closed = {s.label: s for s in saturated}
    lines = [f"## Ranking: requests/s with p99 ≤ {bound_ms:g} ms, open loop", "", what_ran, ""]
    lines += [RANKING_COLUMNS, _RANKING_ALIGN]
    for m in summaries:
        ratio = "-"
        if stick.summary is not None and m.label == stick.summary.label:
            ratio = "yardstick"
        elif stick.summary is not None:
            ratio = ratio_text(round_ratios(measurements, m.label, stick.summary.label))
        rate = f"{m.throughput:.1f}" if m.throughput else "none met it"
        closed_rate = f"{closed[m.label].throughput:.1f}" if m.label in closed else "-"
        lines.append(
            f"| {m.label} | {rate} | {m.low:.0f}-{m.high:.0f} | {ratio} | {m.goodput or 0:.1f} | {m.p50_ms:.1f} | "
            f"{m.p99_ms:.1f} | {_us(m.cpu_us_per_request)} | {_batch(m.batch_size)} | {closed_rate} | {m.settings} |"
        )
    lines.append("")
    if stick.summary is None:
        lines.append(stick.refusal)
    else:
        lines.append(
            f"Yardstick: **{stick.summary.label}**, the faster of the plain ensemble (`loadtest/minimal`) and the "
            "project's ensemble in this run; each ratio is the median of the rounds' ratios (same round, same "
            "machine) with their min-max."
        )
    order = ordering(summaries)
    if order:
        lines += ["", order]
    lines += [
        "",
        "Each figure: the highest offered rate whose p99 met the bound in the search (median over the rounds), with "
        "the goodput (answers within the bound per second), latency, server CPU per request and the mean batch "
        "Triton's encoder formed at that rate.",
        "",
        "![ranking](ranking.png)",
        "",
    ]
    return lines


def _batch(value: float | None) -> str:
    return f"{value:.1f}" if value else "-"


def _method(saturated: list[Summary], ceiling: dict, info: dict, config: MatrixConfig) -> list[str]:
    """The paragraphs above the table: the machine, the phases, the ceiling and its drift over the run."""
    rounds = max((m.rounds for m in saturated), default=1)
    drift = ""
    if "start" in ceiling and ceiling["start"] != ceiling["end"]:
        drift = (
            f" It was {ceiling['start']:.1f} at the start of the run and {ceiling['end']:.1f} at its end "
            f"({(ceiling['end'] - ceiling['start']) / ceiling['start']:+.0%}): the machine's own drift."
        )
    return [
        f"{info['cpus']} CPUs ({info['cpu_model']}), {info['platform']}, Python {info['python']}; "
        f"mix `{config.mix}`, {config.texts_per_request} text(s) per request; saturation: closed loop, "
        f"{config.concurrency} workers, {config.saturation_seconds:g} s, in {rounds} interleaved round(s) "
        f"(each figure: the median, throughput with its min-max); "
        + (
            f"load levels: open loop, {config.load_seconds:g} s each, in the last round."
            if config.load_levels
            else "no open-loop levels."
        )
        + (
            f" Search: in every round, up to {config.search_probes} open-loop probes of {config.search_seconds:g} s "
            f"from 0.8× the closed loop's rate, until the rates that met and missed the bound are within "
            f"{config.search_precision:.0%}."
            if config.search
            else ""
        ),
        "",
        f"{ceiling_name(ceiling)[0].upper()}{ceiling_name(ceiling)[1:]} (no server, best batch size "
        f"{ceiling['batch']}): **{ceiling['rate']:.1f} sequences/s**, measured in the same run.{drift}",
    ] + (SIM_NOTE if ceiling.get("device") == "sim" else [])


def _us(value: float | None) -> str:
    return f"{value:.0f}" if value else "-"


def _row(m: Summary, ceiling: dict) -> str:
    flag = f" (spread {m.spread:.0%})" if m.spread > SPREAD_FLAG else ""
    return (
        f"| {m.label} | {m.throughput:.1f} | {m.low:.0f}-{m.high:.0f}{flag} | "
        f"{m.throughput / ceiling['rate']:.2f} | {m.p50_ms:.1f} | {m.p99_ms:.1f} | {m.success:.1%} | "
        f"{_us(m.cpu_us_per_request)} | {_us(m.front_cpu_us_per_request)} | {efficiency_cells(m, ceiling)} | "
        f"{m.settings} |"
    )


def efficiency_cells(m: Summary, ceiling: dict) -> str:
    """`batch | ORT CPU us/seq | efficiency` cells (dashes where unknown)."""
    if m.batch_size is None or not m.cpu_us_per_request:
        return "- | - | -"
    model = model_cpu(m, ceiling)
    if model is None:
        return f"{m.batch_size:.1f} | - | -"
    return f"{m.batch_size:.1f} | {model:.0f} | {model / m.cpu_us_per_request:.0%}"
