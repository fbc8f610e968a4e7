"""One configuration of the matrix, one round: bring the stack up, warm it up, measure its saturated throughput
(closed loop) with the CPU its processes spend per request and the batch Triton formed, search the highest open-loop
rate whose p99 stays under the run's latency bound (with the CPU and batch at each probed rate), attack it open loop
at fractions of the saturated throughput, take it down. Every attack's raw results are written as it ends."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from loadtest import engine
from loadtest.bound_search import MIN_SUCCESS, Probe, search
from loadtest.matrix.config import MatrixConfig, RunSpec, settings_text, variant_dir
from loadtest.matrix.traces import analyze_config
from loadtest.metrics import GeneratorMetrics
from loadtest.report import summarize
from loadtest.results import Result, write_results
from loadtest.spec import warnings_for
from loadtest.stackrun import RunningStack, running_stack
from loadtest.tracing import ClientTracing, client_tracing

console = Console(stderr=True)

PROBE_LEAD_IN = 0.5
"""Seconds at the start of each probe of the search whose requests are sent but not counted: the generator opens its
connections and the stack's threads wake, which would otherwise set a short probe's p99
(docs/decisions/bound-ranking.md)."""
PAUSE_AFTER_MISS = 1.0
"""Seconds between a probe that missed the bound (the stack may still be draining its queue or shedding) and the
next."""


@dataclass
class Measurement:
    """One attack on one configuration: a row of summary.csv."""

    stack: str
    workers: int
    batching: bool
    kind: str  # saturation | load | probe (one rate of the search) | bound (the search's answer)
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
    latency_bound_ms: float | None = None
    """Probe and bound: the p99 bound of the search."""
    goodput: float | None = None
    """Probe and bound: answers that succeeded within the bound, per second of the attack. A bound row's
    `offered_rate` and `throughput` are the highest rate that met the bound (0 when none did)."""
    variant: str = ""
    """The model variant served (`int8`); empty: the model itself."""
    protocol: str = "http"
    """How the load reached the stack: http, or grpc (the gateway's Open Inference Protocol over gRPC)."""

    @property
    def label(self) -> str:
        text = f"{self.stack} w{self.workers}"
        if self.stack != "fastapi":
            text += f" batching {'on' if self.batching else 'off'}"
        text += f" {self.padding}" if self.padding != "ragged" else ""
        text += " tuned" if self.settings != "defaults" else ""
        text += f" {self.variant}" if self.variant else ""
        text += f" {self.protocol}" if self.protocol != "http" else ""
        return text + (f" {self.tracing}" if self.tracing else "")


def mean_batch(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    """The mean batch Triton's encoder executed between two (sequences, executions) readings; 1 for a stack without
    Triton (in-process ONNX Runtime runs one request a call); None when Triton executed nothing in between."""
    if before and after and after[1] > before[1]:
        return (after[0] - before[0]) / (after[1] - before[1])
    return 1.0 if after is None else None


def scheduled_seconds(spec: engine.AttackSpec, lead_in: int) -> float:
    """The seconds of an open loop's schedule after its first `lead_in` requests (what a goodput divides by)."""
    if spec.rate is None or spec.duration is None:
        raise ValueError(f"{spec.name}: a goodput needs an open loop of a set duration")
    return spec.duration - lead_in / spec.rate


def cpu_us_per_request(
    before: tuple[float, float], after: tuple[float, float], served: float
) -> tuple[float | None, float | None]:
    """(all server processes, the front's) CPU microseconds per served request between two `cpu_seconds()`
    readings; (None, None) when nothing was served."""
    if not served:
        return None, None
    return (after[0] - before[0]) / served * 1e6, (after[1] - before[1]) / served * 1e6


@dataclass
class ConfigRound:
    """The attacks of one configuration in one round, against its running stack."""

    config: MatrixConfig
    run: RunSpec
    running: RunningStack
    raw_dir: Path
    round_no: int
    metrics: GeneratorMetrics | None = None

    def __post_init__(self) -> None:
        self.targets = self.running.targets(self.config.mix, self.config.texts_per_request, count=200)
        self.answered = 0
        """The successes of the last attack, lead-in included."""

    def _tracing(self, rate: float | None) -> ClientTracing | None:
        if self.run.trace_ratio <= 0:
            return None
        attributes = {"loadtest.rate": rate or 0.0, "loadtest.attack": self.run.name, "loadtest.mix": self.config.mix}
        if not rate:
            attributes["loadtest.concurrency"] = self.config.concurrency
        return client_tracing(
            self.run.trace_ratio, self.running.request_format, self.running.options.tracing_url, attributes
        )

    def _closed(self, seconds: float) -> engine.AttackSpec:
        return engine.AttackSpec(
            targets=self.targets,
            rate=None,
            concurrency=self.config.concurrency,
            duration=seconds,
            name=self.run.name,
            tracing=self._tracing(None),
        )

    def saturate(self) -> Measurement:
        """Warm up, then the closed loop; the figures of the saturation row include its CPU and batch size."""
        engine.attack(self._closed(self.config.warmup_seconds), lambda r: None)
        batches_before = self.running.triton_batches()
        cpu_before = self.running.cpu_seconds()
        spec = self._closed(self.config.saturation_seconds)
        saturation = self._measure(spec, "saturation", f"r{self.round_no}-{self.run.name}-saturation.jsonl")
        cpu_after = self.running.cpu_seconds()
        saturation.batch_size = mean_batch(batches_before, self.running.triton_batches())
        served = saturation.throughput * self.config.saturation_seconds
        saturation.cpu_us_per_request, saturation.front_cpu_us_per_request = cpu_us_per_request(
            cpu_before, cpu_after, served
        )
        console.print(
            f"{saturation.label}: saturated at {saturation.throughput:.1f} req/s (p50 {saturation.p50_ms:.1f} ms)"
        )
        return saturation

    def search(self, start: float, bound_ms: float) -> list[Measurement]:
        """The highest open-loop rate whose p99 meets `bound_ms`, searched from `start` req/s: every probe's row,
        then the bound row (the best probe's figures; offered rate 0 when no probe met the bound)."""
        config = self.config
        rows: list[Measurement] = []

        def probe(rate: float) -> Probe:
            if rows and not (rows[-1].p99_ms <= bound_ms and rows[-1].success >= MIN_SUCCESS):
                time.sleep(PAUSE_AFTER_MISS)  # let a stack that was overloaded drain and stop shedding
            batches_before = self.running.triton_batches()
            cpu_before = self.running.cpu_seconds()
            spec = engine.AttackSpec(
                targets=self.targets,
                rate=rate,
                duration=config.search_seconds + PROBE_LEAD_IN,
                name=self.run.name,
                timeout=max(5.0, 20 * bound_ms / 1000),
            )
            filename = f"r{self.round_no}-{self.run.name}-probe{rate:g}.jsonl"
            row = self._measure(spec, "probe", filename, bound_ms, lead_in=int(rate * PROBE_LEAD_IN))
            row.cpu_us_per_request, row.front_cpu_us_per_request = cpu_us_per_request(
                cpu_before, self.running.cpu_seconds(), self.answered
            )
            row.batch_size = mean_batch(batches_before, self.running.triton_batches())
            rows.append(row)
            return Probe(rate, row.p99_ms, row.success, row.goodput or 0.0, {"row": row})

        found = search(probe, bound_ms, start, probes=config.search_probes, precision=config.search_precision)
        best = found.best
        if best is None:
            bound = replace(rows[-1], kind="bound", offered_rate=0.0, throughput=0.0, goodput=0.0, warnings=[])
            console.print(f"{bound.label}: no rate probed met p99 <= {bound_ms:g} ms")
        else:
            bound = replace(best.details["row"], kind="bound", throughput=best.rate)
            console.print(
                f"{bound.label}: {best.rate:.1f} req/s with p99 {best.p99_ms:.1f} ms <= {bound_ms:g} ms "
                f"({len(found.probes)} probes)"
            )
        return [*rows, bound]

    def load(self, rate: float) -> Measurement:
        """Open loop at `rate` for the config's `load_seconds`; its warnings are printed as they come."""
        spec = engine.AttackSpec(
            targets=self.targets,
            rate=rate,
            duration=self.config.load_seconds,
            name=self.run.name,
            timeout=30,
            tracing=self._tracing(rate),
        )
        measurement = self._measure(spec, "load", f"r{self.round_no}-{self.run.name}-rate{rate:g}.jsonl")
        for note in measurement.warnings:
            console.print(f"[bold red]WARNING[/] {measurement.label} at {rate:g} req/s: {note}")
        return measurement

    def _measure(
        self, spec: engine.AttackSpec, kind: str, filename: str, bound_ms: float | None = None, lead_in: int = 0
    ) -> Measurement:
        """Run one attack, feed the generator's metrics as results come, write its raw results (every request),
        summarise it without its first `lead_in` requests. Saturated throughput counts successes over the attack's
        wall time, load throughput is the summary's; with `bound_ms`, the goodput: successes within the bound per
        second of the counted schedule. `self.answered`: the successes of the whole attack (for CPU per request)."""
        run = self.run
        results: list[Result] = []
        labels = {"stack": run.stack, "workers": str(run.workers), "batching": "on" if run.batching else "off"}
        observe = self.metrics.observer(labels | {"rate": f"{spec.rate or 0:g}"}) if self.metrics else None

        def on_result(result: Result) -> None:
            results.append(result)
            if observe:
                observe(result)

        stats = engine.attack(spec, on_result)
        write_results(sorted(results, key=lambda r: r.seq), self.raw_dir / filename)
        self.answered = sum(1 for r in results if 200 <= r.code < 400)
        results = [r for r in results if r.seq >= lead_in] or results
        summary = summarize(results)
        lat = summary["latencies"]
        ok = sum(1 for r in results if 200 <= r.code < 400)
        throughput = ok / stats.wall_seconds if kind == "saturation" else summary["throughput"]
        goodput = None
        if bound_ms is not None:
            good = sum(1 for r in results if 200 <= r.code < 400 and r.latency <= bound_ms * 1e6)
            goodput = good / scheduled_seconds(spec, lead_in)
        return Measurement(
            stack=run.stack,
            workers=run.workers,
            batching=run.batching,
            kind=kind,
            offered_rate=spec.rate,
            throughput=throughput,
            success=summary["success"],
            p50_ms=lat["50th"] / 1e6,
            p90_ms=lat["90th"] / 1e6,
            p99_ms=lat["99th"] / 1e6,
            max_ms=lat["max"] / 1e6,
            requests=len(results),
            warnings=warnings_for(spec, stats),
            padding=run.padding,
            tracing=run.tracing,
            round=self.round_no,
            settings=settings_text(run.tuning),
            latency_bound_ms=bound_ms,
            goodput=goodput,
            variant=run.variant,
            protocol=run.protocol,
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
    bound_ms: float | None = None,
) -> list[Measurement]:
    """One configuration, one round: up (its variant served from `variant_dir(model_dir)`), warm up, saturate, the
    search under `bound_ms` (when given and the config searches; it starts at 0.8 of the saturated throughput), the
    open-loop levels (`load_levels` as fractions of the saturated throughput, default the config's), down. A traced
    configuration's analysis goes into `analyses` (when given) under its name."""
    levels = config.load_levels if load_levels is None else load_levels
    traced = run.trace_ratio > 0
    with running_stack(
        run.stack,
        variant_dir(model_dir, run.variant),
        workers=run.workers,
        batching=run.batching,
        padding=run.padding,
        traces=traced,
        tuning=run.tuning_settings(),
        protocol=run.protocol,
        **config.device_settings,
    ) as running:
        attacks = ConfigRound(config, run, running, raw_dir, round_no, metrics)
        saturation = attacks.saturate()
        measurements = [saturation]
        if config.search and bound_ms:
            measurements += attacks.search(max(1.0, 0.8 * saturation.throughput), bound_ms)
        for level in levels:
            measurements.append(attacks.load(max(1.0, round(level * saturation.throughput, 1))))
        if traced and analyses is not None:
            analyses[run.name] = analyze_config(running.trace_store, raw_dir.parent / "traces" / run.name)
    return measurements
