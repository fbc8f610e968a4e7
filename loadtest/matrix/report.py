"""What a matrix run leaves in results/<run-id>/: summary.json and summary.csv (every measurement), machine.json,
the charts (throughput.png, latency.png) and report.md, all from the measurements, so `loadtest plot` can redraw
them from summary.json."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

from loadtest.ceiling import ceiling_name
from loadtest.matrix.config import MatrixConfig
from loadtest.matrix.goals import gateway_goals, goals_section
from loadtest.matrix.measure import Measurement
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
    lines = [f"# Benchmark {name}", "", *_method(saturated, ceiling, info, config), "", COLUMNS, _ALIGN]
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
    lines += goals_section(gateway_goals(measurements, saturated, ceiling, info.get("model", "")))
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
