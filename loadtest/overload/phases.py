"""The attacks against a running stack. Overload: measure its saturated rate (closed loop), attack it open loop at
FACTOR x that rate, then measure again right after; soak: open loop at a fraction of that rate for a long time."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from loadtest import engine
from loadtest.overload import cpu
from loadtest.overload.config import SHED_CODES, OverloadConfig
from loadtest.overload.judge import OverloadReport, judge
from loadtest.overload.sampling import (
    MemorySampler,
    is_ok,
    percentile_ms,
    recovery_time,
    rss_growth,
    saturated_rate,
    timeline,
)
from loadtest.results import Result, write_results
from loadtest.stackrun import RunningStack

console = Console(stderr=True)


@dataclass
class _Phases:
    """What the three phases of the overload left: their results, the CPU readings around the saturation and the
    overload, the generator's stats and the memory samples of the open-loop attack."""

    before: list[Result]
    attack: list[Result]
    after: list[Result]
    readings: tuple[cpu.CpuReading, ...]
    """Before the saturation, after it, as the overload starts, after it."""
    rate: float
    offered: float
    attack_end: float
    stats: engine.AttackStats
    memory: MemorySampler


def overload(config: OverloadConfig, stack: RunningStack, raw_dir: Path | None = None) -> OverloadReport:
    """Saturate, overload, recover against a running stack; returns the figures and the verdicts (and writes each
    phase's raw results into `raw_dir` when given)."""
    phases = _run_phases(config, stack)
    if raw_dir is not None:
        raw_dir.mkdir(parents=True, exist_ok=True)
        for name, rows in (("saturation", phases.before), ("overload", phases.attack), ("recovery", phases.after)):
            write_results(sorted(rows, key=lambda r: r.seq), raw_dir / f"{name}.jsonl")
    report = _figures(config, phases)
    report.verdicts = judge(config, report)
    return report


def _run_phases(config: OverloadConfig, stack: RunningStack) -> _Phases:
    targets = stack.targets()
    engine.closed_run(targets, config.warmup_seconds, config.concurrency, "warmup")
    readings = [cpu.read(stack)]
    before, _ = engine.closed_run(targets, config.saturate_seconds, config.concurrency, "saturation")
    readings.append(cpu.read(stack))
    rate = saturated_rate(before, config.saturate_seconds)
    if rate <= 0:
        raise RuntimeError(f"the stack served nothing in {config.saturate_seconds:g} s: is it healthy?")
    offered = round(config.factor * rate, 1)
    console.print(f"saturated at {rate:.1f} req/s; overload at {offered:.1f} req/s for {config.overload_seconds:g} s")
    spec = engine.AttackSpec(
        targets=targets, rate=offered, duration=config.overload_seconds, name="overload", timeout=30
    )
    attack: list[Result] = []
    with MemorySampler(stack) as memory:
        readings.append(cpu.read(stack))
        stats = engine.attack(spec, attack.append, processes=config.procs)
        readings.append(cpu.read(stack))
    after, _ = engine.closed_run(targets, config.recovery_seconds, config.concurrency, "recovery")
    end = max(r.timestamp for r in attack) + 1 / offered  # its schedule's end: several processes start theirs later
    return _Phases(before, attack, after, tuple(readings), rate, offered, end, stats, memory)


def _figures(config: OverloadConfig, phases: _Phases) -> OverloadReport:
    """The overload's figures from its phases (the verdicts not yet judged)."""
    attack, rate, memory = phases.attack, phases.rate, phases.memory
    sat_start, sat_end, over_start, over_end = phases.readings
    limit = cpu.cpu_limit()
    ok = [r for r in attack if is_ok(r)]
    first = min(r.timestamp for r in attack)
    last = max(r.timestamp for r in attack)
    goodput = len(ok) / max(last - first, 1e-9)  # 2xx per second of the attack's schedule
    settled = memory.at(first + config.settle_seconds)
    shed = [r for r in attack if r.code in SHED_CODES]
    front_per_ok = (sat_end.front - sat_start.front) / max(len([r for r in phases.before if is_ok(r)]), 1)
    front_overload = over_end.front - over_start.front
    end = memory.samples[-1][1]
    return OverloadReport(
        saturated_rate=rate,
        offered_rate=phases.offered,
        codes=dict(Counter(str(r.code) for r in attack)),
        goodput=goodput,
        goodput_ratio=goodput / rate,
        admitted_p50_ms=percentile_ms(ok, 50),
        admitted_p99_ms=percentile_ms(ok, 99),
        shed_without_retry_after=sum(1 for r in shed if not r.retry_after),
        rss_settled=settled,
        rss_end=end,
        rss_max_growth=rss_growth(settled, end),
        recovery_seconds=recovery_time(phases.after, phases.attack_end, rate),
        front_cpu_us_per_ok=front_per_ok * 1e6,
        front_cpu_us_per_shed=(front_overload - len(ok) * front_per_ok) / max(len(shed), 1) * 1e6,
        cpu_saturation=cpu.phase_cpu(sat_start, sat_end, limit),
        cpu_overload=cpu.phase_cpu(over_start, over_end, limit),
        generator_lag_ms=phases.stats.max_lag * 1000,
        timeline=timeline(attack + phases.after, first, 1.0, memory),
    )


@dataclass
class SoakReport:
    rate: float
    seconds: float
    requests: int
    codes: dict[str, int]
    p50_ms: float
    p99_ms: float
    rss_start_mb: float
    rss_end_mb: float
    timeline: list[dict]


def soak(config: OverloadConfig, stack: RunningStack, rate: float) -> SoakReport:
    """An open-loop run at `rate` for config.soak_seconds, binned over time."""
    targets = stack.targets()
    spec = engine.AttackSpec(targets=targets, rate=rate, duration=config.soak_seconds, name="soak", timeout=30)
    results: list[Result] = []
    with MemorySampler(stack, every=min(10.0, config.soak_bin_seconds)) as memory:
        engine.attack(spec, results.append, processes=config.procs)
    ok = [r for r in results if is_ok(r)]
    return SoakReport(
        rate=rate,
        seconds=config.soak_seconds,
        requests=len(results),
        codes=dict(Counter(str(r.code) for r in results)),
        p50_ms=percentile_ms(ok, 50),
        p99_ms=percentile_ms(ok, 99),
        rss_start_mb=sum(memory.samples[0][1].values()) / 2**20,
        rss_end_mb=sum(memory.samples[-1][1].values()) / 2**20,
        timeline=timeline(results, min((r.timestamp for r in results), default=0.0), config.soak_bin_seconds, memory),
    )
