"""`loadtest matrix`: the one benchmark driver. For each STACK x WORKERS x BATCHING x PADDING in a matrix file
(`loadtest/matrices/*.toml`: the study, the stack comparison, the padding comparison): bring the stack up with the
launcher `make up` uses, warm up, measure its saturated throughput (closed loop) and the CPU its processes spend per
request, attack it open loop at fractions of that throughput, take it down; then write results/<run-id>/ with raw
results, summary CSV/JSON, machine info and a Markdown report with charts."""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import importlib.metadata
import json
import os
import platform
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console

from loadtest import engine
from loadtest.metrics import GeneratorMetrics
from loadtest.report import summarize
from loadtest.results import Result, write_results
from loadtest.sentences import MIXES
from loadtest.stackrun import running_stack
from loadtest.tracing import ClientTracing, client_tracing

console = Console(stderr=True)


@dataclass(frozen=True)
class RunSpec:
    stack: str
    workers: int
    batching: bool
    padding: str = "ragged"
    trace_ratio: float = 0.0
    tuning: tuple = ()
    """(setting, value) pairs from `loadtest tune` (a matrix entry's `tuning` table)."""
    tracing: str = ""
    """Set when the matrix varies tracing (a `trace` axis): "trace 1%", "no tracing"; part of the name and label."""

    @property
    def name(self) -> str:
        suffix = "" if self.padding == "ragged" else f"-{self.padding}"
        if self.tracing:
            suffix += f"-trace{self.trace_ratio:g}"
        if self.tuning:
            suffix += "-tuned"
        return f"{self.stack}-w{self.workers}-{'on' if self.batching else 'off'}{suffix}"


def _frozen(value):
    return tuple(value) if isinstance(value, list) else value


def settings_text(tuning) -> str:
    """`max_queue_delay_us=500, encoder_instances=2` (or `defaults`) for the report."""
    items = dict(tuning)
    return ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in items.items()) or "defaults"


@dataclass
class MatrixConfig:
    configs: list[dict]
    mix: str = "short"
    texts_per_request: int = 1
    concurrency: int = 32
    warmup_seconds: float = 2
    saturation_seconds: float = 8
    load_seconds: float = 5
    load_levels: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75, 1.0, 1.25])
    ceiling_seconds: float = 10
    rounds: int = 1
    """Interleaved rounds (A B C, A B C, ...): each figure is reported as the median with its min-max; the open-loop
    levels run in the last round."""
    trace_ratio: float = 0.0
    """Share of requests traced end to end; > 0 stores each configuration's traces and adds the stage breakdown and
    the bottleneck verdict to the report."""

    @classmethod
    def load(cls, path: Path) -> MatrixConfig:
        return cls(**tomllib.loads(Path(path).read_text()))

    def runs(self) -> list[RunSpec]:
        runs = []
        for entry in self.configs:
            for workers in entry.get("workers", [1]):
                for batching in entry.get("batching", ["on"]):
                    for padding in entry.get("padding", ["ragged"]):
                        for ratio in entry.get("trace", [self.trace_ratio]):
                            label = (f"trace {ratio:.0%}" if ratio else "no tracing") if "trace" in entry else ""
                            tuning = tuple(sorted((k, _frozen(v)) for k, v in entry.get("tuning", {}).items()))
                            spec = RunSpec(
                                entry["stack"], int(workers), batching == "on", padding, ratio, tuning, label
                            )
                            runs.append(spec)
        return runs


@dataclass
class Measurement:
    stack: str
    workers: int
    batching: bool
    kind: str  # saturation | load
    offered_rate: float | None
    throughput: float
    success: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    requests: int
    warnings: list[str] = field(default_factory=list)
    padding: str = "ragged"
    tracing: str = ""
    round: int = 1
    settings: str = "defaults"
    batch_size: float | None = None
    """Saturation: the mean batch Triton's encoder executed (sequences / executions); 1 for in-process ORT."""
    cpu_us_per_request: float | None = None
    """Saturation: CPU time of every server process of the stack per successful request (load generator excluded)."""
    front_cpu_us_per_request: float | None = None
    """Saturation: CPU time of the process group receiving requests (for STACK=clearml: the gateway, outside
    Triton) per successful request."""
    model_cpu_us_per_sequence: float | None = None
    """Saturation: raw ONNX Runtime's CPU per sequence at `batch_size`, from the references measured just before
    and just after this measurement's round (the machine's speed drifts within a run)."""

    @property
    def label(self) -> str:
        text = f"{self.stack} w{self.workers}"
        if self.stack != "fastapi":
            text += f" batching {'on' if self.batching else 'off'}"
        text += f" {self.padding}" if self.padding != "ragged" else ""
        text += " tuned" if self.settings != "defaults" else ""
        return text + (f" {self.tracing}" if self.tracing else "")


def machine_info() -> dict:
    packages = {}
    for name in ("onnxruntime", "tokenizers", "nvidia-pytriton", "tritonclient", "fastapi", "uvicorn", "gunicorn"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            packages[name] = importlib.metadata.version(name)
    cpu_model = ""
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu_model = next(line.split(":", 1)[1].strip() for line in lines if "model name" in line)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": packages,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _measure(
    spec: engine.AttackSpec,
    run: RunSpec,
    kind: str,
    metrics: GeneratorMetrics | None,
    out: Path,
    round_no: int = 1,
) -> Measurement:
    results: list[Result] = []
    labels = {
        "stack": run.stack,
        "workers": str(run.workers),
        "batching": "on" if run.batching else "off",
        "rate": f"{spec.rate or 0:g}",
    }
    observe = metrics.observer(labels) if metrics else None

    def on_result(result: Result) -> None:
        results.append(result)
        if observe:
            observe(result)

    stats = engine.attack(spec, on_result)
    write_results(sorted(results, key=lambda r: r.seq), out)
    summary = summarize(results)
    lat = summary["latencies"]
    throughput = (
        summary["throughput"] if kind == "load" else sum(1 for r in results if 200 <= r.code < 400) / stats.wall_seconds
    )
    return Measurement(
        run.stack,
        run.workers,
        run.batching,
        kind,
        spec.rate,
        throughput,
        summary["success"],
        lat["50th"] / 1e6,
        lat["90th"] / 1e6,
        lat["99th"] / 1e6,
        lat["max"] / 1e6,
        len(results),
        engine.warnings_for(spec, stats),
        padding=run.padding,
        tracing=run.tracing,
        round=round_no,
        settings=settings_text(run.tuning),
    )


def run_config(
    config: MatrixConfig,
    run: RunSpec,
    model_dir: Path,
    raw_dir: Path,
    metrics: GeneratorMetrics | None = None,
    analyses: dict | None = None,
    round_no: int = 1,
    load_levels: list[float] | None = None,
) -> list[Measurement]:
    """One configuration, one round: up, warm up, saturate, the open-loop levels (`load_levels`, default the
    config's), down."""
    measurements = []
    levels = config.load_levels if load_levels is None else load_levels
    traced = run.trace_ratio > 0
    with running_stack(
        run.stack,
        model_dir,
        workers=run.workers,
        batching=run.batching,
        padding=run.padding,
        traces=traced,
        tuning={k: list(v) if isinstance(v, tuple) else v for k, v in run.tuning},
    ) as running:
        targets = running.targets(config.mix, config.texts_per_request, count=200)
        name = run.name

        def tracing(rate: float | None) -> ClientTracing | None:
            if not traced:
                return None
            attributes = {"loadtest.rate": rate or 0.0, "loadtest.attack": name}
            return client_tracing(run.trace_ratio, running.request_format, running.options.tracing_url, attributes)

        def closed(seconds: float) -> engine.AttackSpec:
            return engine.AttackSpec(
                targets=targets,
                rate=None,
                concurrency=config.concurrency,
                duration=seconds,
                name=name,
                tracing=tracing(None),
            )

        engine.attack(closed(config.warmup_seconds), lambda r: None)
        batches_before = running.triton_batches()
        cpu_before = running.cpu_seconds()
        saturation = _measure(
            closed(config.saturation_seconds),
            run,
            "saturation",
            metrics,
            raw_dir / f"r{round_no}-{name}-saturation.jsonl",
            round_no,
        )
        cpu_after = running.cpu_seconds()
        batches_after = running.triton_batches()
        if batches_before and batches_after and batches_after[1] > batches_before[1]:
            sequences = batches_after[0] - batches_before[0]
            saturation.batch_size = sequences / (batches_after[1] - batches_before[1])
        elif batches_after is None:
            saturation.batch_size = 1.0  # in-process ONNX Runtime: one request a call
        served = saturation.throughput * config.saturation_seconds
        if served:
            saturation.cpu_us_per_request = (cpu_after[0] - cpu_before[0]) / served * 1e6
            saturation.front_cpu_us_per_request = (cpu_after[1] - cpu_before[1]) / served * 1e6
        measurements.append(saturation)
        console.print(
            f"{saturation.label}: saturated at {saturation.throughput:.1f} req/s (p50 {saturation.p50_ms:.1f} ms)"
        )
        for level in levels:
            rate = max(1.0, round(level * saturation.throughput, 1))
            spec = engine.AttackSpec(
                targets=targets, rate=rate, duration=config.load_seconds, name=name, timeout=30, tracing=tracing(rate)
            )
            measurement = _measure(
                spec, run, "load", metrics, raw_dir / f"r{round_no}-{name}-rate{rate:g}.jsonl", round_no
            )
            measurements.append(measurement)
            for note in measurement.warnings:
                console.print(f"[bold red]WARNING[/] {measurement.label} at {rate:g} req/s: {note}")
        if traced and analyses is not None:
            analyses[name] = analyze_config(running.trace_store, raw_dir.parent / "traces" / name)
    return measurements


def analyze_config(store_path: Path, out: Path) -> dict:
    """The configuration's traces: kept (the span store), analysed (report and charts), summarised for report.md."""
    import shutil
    import time

    from services.analysis import report
    from services.analysis.decompose import decompose_all
    from services.analysis.store import SpanStore
    from services.analysis.verdict import analyze

    time.sleep(2)  # Triton's span processor exports every second
    out.mkdir(parents=True, exist_ok=True)
    store = SpanStore(store_path)
    spans = store.spans()
    store.close()
    shutil.copy(store_path, out / "spans.db")
    try:
        analysis = analyze(decompose_all(spans))
    except ValueError as error:
        return {"error": str(error)}
    report.write(analysis, out, f"Bottleneck analysis: {out.name}")
    top = analysis.top
    stages = sorted(top.stages, key=lambda s: -s.share)[:4]
    return {
        "verdict": analysis.verdict,
        "advice": analysis.advice,
        "level": top.name,
        "traces": sum(lv.traces for lv in analysis.levels),
        "top_stages": [{"stage": s.name, "share": s.share, "p99_ms": s.p99_ms} for s in stages],
    }


SPREAD_FLAG = 0.10


@dataclass
class Summary:
    """A configuration's saturation over its rounds: medians, and the throughput's min-max."""

    label: str
    stack: str
    workers: int
    batching: bool
    rounds: int
    throughput: float
    low: float
    high: float
    p50_ms: float
    p99_ms: float
    success: float
    cpu_us_per_request: float | None
    front_cpu_us_per_request: float | None
    settings: str = "defaults"
    batch_size: float | None = None
    model_cpu_us_per_sequence: float | None = None

    @property
    def spread(self) -> float:
        return (self.high - self.low) / self.throughput if self.throughput else 0.0


def aggregate(saturated: list[Measurement]) -> list[Summary]:
    import statistics

    def median(values):
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None

    groups: dict[str, list[Measurement]] = {}
    for m in saturated:
        groups.setdefault(m.label, []).append(m)
    found = []
    for label, items in groups.items():
        rates = [m.throughput for m in items]
        first = items[0]
        found.append(
            Summary(
                label,
                first.stack,
                first.workers,
                first.batching,
                len(items),
                median(rates),
                min(rates),
                max(rates),
                median([m.p50_ms for m in items]),
                median([m.p99_ms for m in items]),
                min(m.success for m in items),
                median([m.cpu_us_per_request for m in items]),
                median([m.front_cpu_us_per_request for m in items]),
                first.settings,
                median([m.batch_size for m in items]),
                median([m.model_cpu_us_per_sequence for m in items]),
            )
        )
    return found


def efficiency_cells(m: Summary, ceiling: dict) -> str:
    """`batch | ORT CPU us/seq | efficiency` cells (dashes where unknown)."""
    from loadtest.ceiling import model_cpu_at

    if m.batch_size is None or not m.cpu_us_per_request:
        return "- | - | -"
    model = m.model_cpu_us_per_sequence or model_cpu_at(ceiling.get("cpu_us_per_sequence", {}), m.batch_size)
    if model is None:
        return f"{m.batch_size:.1f} | - | -"
    return f"{m.batch_size:.1f} | {model:.0f} | {model / m.cpu_us_per_request:.0%}"


def write_outputs(
    out: Path,
    measurements: list[Measurement],
    ceiling: dict,
    info: dict,
    config: MatrixConfig,
    analyses: dict | None = None,
) -> None:
    rows = [asdict(m) | {"label": m.label} for m in measurements]
    summary = {"ceiling": ceiling, "measurements": rows, "analyses": analyses or {}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "machine.json").write_text(json.dumps(info, indent=2))
    with open(out / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[k for k in rows[0] if k != "warnings"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    from loadtest.plots import latency_chart, throughput_chart

    saturated = aggregate([m for m in measurements if m.kind == "saturation"])
    throughput_chart(saturated, ceiling["rate"], out / "throughput.png")
    load = [m for m in measurements if m.kind == "load"]
    if load:
        latency_chart(load, out / "latency.png")
    rounds = max((m.rounds for m in saturated), default=1)
    drift = ""
    if "start" in ceiling and ceiling["start"] != ceiling["end"]:
        drift = (
            f" It was {ceiling['start']:.1f} at the start of the run and {ceiling['end']:.1f} at its end "
            f"({(ceiling['end'] - ceiling['start']) / ceiling['start']:+.0%}): the machine's own drift."
        )
    lines = [
        f"# Benchmark {out.name}",
        "",
        f"{info['cpus']} CPUs ({info['cpu_model']}), {info['platform']}, Python {info['python']}; "
        f"mix `{config.mix}`, {config.texts_per_request} text(s) per request; saturation: closed loop, "
        f"{config.concurrency} workers, {config.saturation_seconds:g} s, in {rounds} interleaved round(s) "
        f"(each figure: the median, throughput with its min-max); load levels: open loop, "
        f"{config.load_seconds:g} s each, in the last round.",
        "",
        f"Raw ONNX Runtime ceiling (no server, best batch size {ceiling['batch']}): **{ceiling['rate']:.1f} "
        f"sequences/s**, measured in the same run.{drift}",
        "",
        "| configuration | saturated req/s | min-max | x ceiling | p50 ms | p99 ms | success | server CPU us/req "
        "| front CPU us/req | batch | ORT CPU us/seq at that batch | efficiency | settings |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def us(value: float | None) -> str:
        return f"{value:.0f}" if value else "-"

    for m in sorted(saturated, key=lambda m: -m.throughput):
        flag = f" (spread {m.spread:.0%})" if m.spread > SPREAD_FLAG else ""
        lines.append(
            f"| {m.label} | {m.throughput:.1f} | {m.low:.0f}-{m.high:.0f}{flag} | "
            f"{m.throughput / ceiling['rate']:.2f} | {m.p50_ms:.1f} | {m.p99_ms:.1f} | {m.success:.1%} | "
            f"{us(m.cpu_us_per_request)} | {us(m.front_cpu_us_per_request)} | {efficiency_cells(m, ceiling)} | "
            f"{m.settings} |"
        )
    flagged = [m for m in saturated if m.spread > SPREAD_FLAG]
    if flagged:
        lines += [
            "",
            f"Spread over {SPREAD_FLAG:.0%} between rounds (the machine was noisy; compare these with care): "
            + ", ".join(f"{m.label} ({m.spread:.0%})" for m in flagged)
            + ".",
        ]
    lines += [
        "",
        "Server CPU: every process of the stack (load generator excluded); front: the processes that "
        "receive the requests (the gateway for clearml, everything outside Triton). Batch: the mean batch Triton's "
        "encoder executed at saturation (1 for in-process ONNX Runtime); efficiency: raw ONNX Runtime's CPU per "
        "sequence at that batch size (tokenization included, no server; measured with the ceiling at batch 1 to 64 "
        "before and after each round, the two around a configuration's round averaged, interpolated) over the "
        "stack's CPU per request: 100% would be a server that costs nothing beyond the model; above 100%, the "
        "machine was faster during that configuration than around it.",
        "",
        "![throughput](throughput.png)",
        "",
    ]
    if load:
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
    (out / "report.md").write_text("\n".join(lines) + "\n")


def analysis_section(analyses: dict) -> list[str]:
    lines = ["## Why: where the time goes (tracing-based analysis)", ""]
    for name, found in analyses.items():
        if "error" in found:
            lines += [f"- **{name}**: {found['error']}", ""]
            continue
        shares = ", ".join(f"{s['stage']} {s['share']:.0%}" for s in found["top_stages"])
        lines += [
            f"**{name}** ({found['traces']} traces; at {found['level']}: {shares}). Verdict: {found['verdict']}. "
            f"Knob: {found['advice']}. [analysis](traces/{name}/analysis.md)",
            "",
        ]
    return lines


def reference_summary(references: list[dict]) -> dict:
    """The raw ONNX Runtime references of a run as one: rates and CPU per sequence averaged, first and last kept
    (the report shows the drift between them)."""
    batches = references[0]["cpu_us_per_sequence"]
    return {
        **references[0],
        "rate": sum(r["rate"] for r in references) / len(references),
        "start": references[0]["rate"],
        "end": references[-1]["rate"],
        "cpu_us_per_sequence": {
            b: sum(r["cpu_us_per_sequence"][b] for r in references) / len(references) for b in batches
        },
    }


def run_matrix(config: MatrixConfig, model_dir: Path, out_root: Path, metrics_port: int | None = None) -> Path:
    from loadtest.ceiling import ceiling, model_cpu_at

    run_id = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = out_root / run_id
    raw_dir = out / "raw"
    raw_dir.mkdir(parents=True)
    metrics = None
    if metrics_port:
        metrics = GeneratorMetrics()
        metrics.serve(metrics_port)
    info = machine_info()
    texts = MIXES[config.mix](512)
    references = [ceiling(model_dir, texts, config.ceiling_seconds)]
    console.print(
        f"raw ONNX Runtime ceiling: {references[0]['rate']:.1f} sequences/s at batch {references[0]['batch']}"
    )
    measurements: list[Measurement] = []
    analyses: dict = {}
    runs = config.runs()
    for round_no in range(1, config.rounds + 1):
        last = round_no == config.rounds
        for index, run in enumerate(runs, 1):
            console.print(
                f"[bold]round {round_no}/{config.rounds} ({index}/{len(runs)})[/] STACK={run.stack} "
                f"WORKERS={run.workers} BATCHING={'on' if run.batching else 'off'} PADDING={run.padding}"
                + (f" {run.tracing}" if run.tracing else "")
            )
            measurements += run_config(
                config,
                run,
                model_dir,
                raw_dir,
                metrics,
                analyses if last else None,
                round_no,
                None if last else [],
            )
        if config.rounds > 1:  # the reference after every round: each round is judged against its own machine
            references.append(ceiling(model_dir, texts, config.ceiling_seconds))
            console.print(f"raw ONNX Runtime ceiling after round {round_no}: {references[-1]['rate']:.1f} sequences/s")
    reference = reference_summary(references)
    per_round = {  # each round against the references just before and just after it
        r: reference_summary(references[r - 1 : r + 1])["cpu_us_per_sequence"] for r in range(1, config.rounds + 1)
    }
    for m in measurements:
        if m.kind == "saturation" and m.batch_size:
            m.model_cpu_us_per_sequence = model_cpu_at(per_round[m.round], m.batch_size)
    write_outputs(out, measurements, reference, info, config, analyses)
    return out


def replot(out: Path) -> None:
    """Redraw the charts and report of a finished run from its summary.json."""
    data = json.loads((out / "summary.json").read_text())
    fields = set(Measurement.__dataclass_fields__)
    measurements = [Measurement(**{k: v for k, v in row.items() if k in fields}) for row in data["measurements"]]
    config = MatrixConfig(configs=[])
    machine = json.loads((out / "machine.json").read_text())
    write_outputs(out, measurements, data["ceiling"], machine, config, data.get("analyses"))
