"""`loadtest overload` and `loadtest soak`: what a stack does past its capacity, and over a long run below it.

Overload: bring the stack up, measure its saturated rate (closed loop), attack it open loop at FACTOR x that rate,
then measure again right after. The verdicts are the ones production asks for: only 2xx, 429 and 503 come back (the
refusals with Retry-After), the admitted requests' p99 stays bounded, goodput (2xx per second) during the overload
holds against the saturated rate, every server process's resident memory stays within a band of its value once the
attack has settled, and full throughput is back within seconds of the attack's end.

Soak: the same stack at a fraction of its saturated rate for a long time; errors, latency and memory over time, as a
chart.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console

from loadtest import engine
from loadtest.results import Result, write_results
from loadtest.stackrun import RunningStack, running_stack

console = Console(stderr=True)

SHED_CODES = (429, 503)


@dataclass
class OverloadConfig:
    stack: str = "clearml"
    workers: int = 2
    batching: bool = True
    concurrency: int = 32
    """Closed-loop workers that measure the saturated rate (before and after)."""
    warmup_seconds: float = 2.0
    saturate_seconds: float = 10.0
    factor: float = 3.0
    overload_seconds: float = 60.0
    settle_seconds: float = 10.0
    """Memory is compared with its value this far into the overload: the open loop holds hundreds of connections
    at once, each with its server-side buffers, and reaching that peak takes the first seconds (measured: the
    gateway's workers grow by ~60 MB each within 4 s, then stay flat)."""
    recovery_seconds: float = 10.0
    soak_seconds: float = 0.0
    soak_fraction: float = 0.7
    soak_bin_seconds: float = 30.0
    procs: int = 1
    """Generator processes for the open-loop phases."""
    # What passes: the production bar.
    min_goodput_ratio: float = 0.85
    max_rss_growth: float = 0.10
    max_recovery_seconds: float = 5.0
    admitted_p99_bound_ms: float = 2000.0


@dataclass
class Verdict:
    name: str
    passed: bool
    detail: str


@dataclass
class OverloadReport:
    saturated_rate: float
    offered_rate: float
    codes: dict[str, int]
    goodput: float
    goodput_ratio: float
    admitted_p50_ms: float
    admitted_p99_ms: float
    shed_without_retry_after: int
    rss_settled: dict[str, int]
    rss_end: dict[str, int]
    rss_max_growth: float
    recovery_seconds: float | None
    front_cpu_us_per_ok: float
    """CPU of the process group receiving requests per 2xx, at saturation."""
    front_cpu_us_per_shed: float
    """Its CPU per refusal during the overload (what is left once the 2xx are paid at the saturated cost)."""
    server_cpu_overload: float
    """CPUs busy in all server processes during the overload."""
    generator_lag_ms: float
    generator_cpu: float
    verdicts: list[Verdict] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)


class MemorySampler:
    """Samples the stack's resident memory (and the time) in a thread while an attack runs."""

    def __init__(self, stack: RunningStack, every: float = 1.0):
        self.stack, self.every = stack, every
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self.stack.rss()))
            self._stop.wait(self.every)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self.stack.rss()))

    def at(self, when: float) -> dict[str, int]:
        """The first sample at or after `when` (the last one if none)."""
        return next((rss for stamp, rss in self.samples if stamp >= when), self.samples[-1][1])


def _ok(result: Result) -> bool:
    return 200 <= result.code < 300


def _percentile_ms(results: list[Result], q: float) -> float:
    return float(np.percentile([r.latency for r in results], q)) / 1e6 if results else float("nan")


def saturated_rate(results: list[Result], seconds: float) -> float:
    return sum(1 for r in results if _ok(r)) / seconds


def recovery_time(results: list[Result], attack_end: float, rate: float, window: float = 1.0) -> float | None:
    """Seconds from the attack's end until a `window` of completions first reaches 90% of `rate`: the end of
    that window (None: it never did)."""
    ends = np.sort([r.timestamp + r.latency / 1e9 for r in results if _ok(r)])
    need = int(np.ceil(0.9 * rate * window))
    if len(ends) < need or need == 0:
        return None
    # the window [ends[i] - window, ends[i]] holds ends[j..i]: first i where i - j + 1 >= need
    for i in range(need - 1, len(ends)):
        if ends[i] - ends[i - need + 1] <= window:
            return max(0.0, float(ends[i] - attack_end))
    return None


def timeline(results: list[Result], start: float, bin_seconds: float, memory: MemorySampler) -> list[dict]:
    """Per bin of due times: 2xx/s, shed/s, other errors/s, p50/p99 of the admitted, total resident memory."""
    rows = []
    bins: dict[int, list[Result]] = {}
    for r in results:
        bins.setdefault(int((r.timestamp - start) // bin_seconds), []).append(r)
    last = max((r.timestamp for r in results), default=start)
    for index in sorted(bins):
        if start + (index + 0.5) * bin_seconds > last and index:
            continue  # the final, partial bin would read as a drop
        chunk = bins[index]
        ok = [r for r in chunk if _ok(r)]
        shed = sum(1 for r in chunk if r.code in SHED_CODES)
        rss = memory.at(start + (index + 1) * bin_seconds)
        rows.append(
            {
                "t": index * bin_seconds,
                "ok_per_s": len(ok) / bin_seconds,
                "shed_per_s": shed / bin_seconds,
                "errors_per_s": (len(chunk) - len(ok) - shed) / bin_seconds,
                "p50_ms": _percentile_ms(ok, 50),
                "p99_ms": _percentile_ms(ok, 99),
                "rss_mb": sum(rss.values()) / 2**20,
            }
        )
    return rows


def judge(config: OverloadConfig, report: OverloadReport) -> list[Verdict]:
    others = {code: n for code, n in report.codes.items() if not (code.startswith("2") or int(code) in SHED_CODES)}
    rss_worst = max(report.rss_max_growth, 0.0)
    recovered = report.recovery_seconds
    return [
        Verdict(
            "only 2xx, 429 and 503",
            not others,
            "codes " + ", ".join(f"{n} x {c}" for c, n in sorted(report.codes.items())),
        ),
        Verdict(
            "refusals carry Retry-After",
            report.shed_without_retry_after == 0,
            f"{report.shed_without_retry_after} refusals without it",
        ),
        Verdict(
            "admitted p99 bounded",
            report.admitted_p99_ms <= config.admitted_p99_bound_ms,
            f"p99 {report.admitted_p99_ms:.0f} ms (bound {config.admitted_p99_bound_ms:.0f} ms), "
            f"p50 {report.admitted_p50_ms:.0f} ms",
        ),
        Verdict(
            f"goodput >= {config.min_goodput_ratio:.0%} of saturated",
            report.goodput_ratio >= config.min_goodput_ratio,
            f"{report.goodput:.1f} 2xx/s during the overload against {report.saturated_rate:.1f} saturated "
            f"({report.goodput_ratio:.0%})",
        ),
        Verdict(
            f"memory within {config.max_rss_growth:.0%}",
            rss_worst <= config.max_rss_growth,
            f"largest growth of one process after {config.settle_seconds:g} s: {rss_worst:+.1%}",
        ),
        Verdict(
            f"throughput back within {config.max_recovery_seconds:g} s",
            recovered is not None and recovered <= config.max_recovery_seconds,
            "never back to 90% of saturated" if recovered is None else f"back after {recovered:.1f} s",
        ),
    ]


def _rss_growth(settled: dict[str, int], end: dict[str, int]) -> float:
    """The largest relative growth of one process present at both times."""
    growth = [(end[k] - settled[k]) / settled[k] for k in settled.keys() & end.keys() if settled[k]]
    return max(growth, default=0.0)


def overload(config: OverloadConfig, stack: RunningStack, raw_dir: Path | None = None) -> OverloadReport:
    """Saturate, overload, recover against a running stack; returns the figures and the verdicts."""
    targets = stack.targets()
    engine.closed_run(targets, config.warmup_seconds, config.concurrency, "warmup")
    cpu_start = stack.cpu_seconds()
    before, _ = engine.closed_run(targets, config.saturate_seconds, config.concurrency, "saturation")
    cpu_saturated = stack.cpu_seconds()
    rate = saturated_rate(before, config.saturate_seconds)
    if rate <= 0:
        raise RuntimeError(f"the stack served nothing in {config.saturate_seconds:g} s: is it healthy?")
    offered = round(config.factor * rate, 1)
    console.print(f"saturated at {rate:.1f} req/s; overload at {offered:.1f} req/s for {config.overload_seconds:g} s")
    spec = engine.AttackSpec(
        targets=targets, rate=offered, duration=config.overload_seconds, name="overload", timeout=30
    )
    attack_results: list[Result] = []
    start = time.time()
    with MemorySampler(stack) as memory:
        stats = engine.attack(spec, attack_results.append, processes=config.procs)
    cpu_overload = stack.cpu_seconds()
    attack_end = start + config.overload_seconds
    after, _ = engine.closed_run(targets, config.recovery_seconds, config.concurrency, "recovery")
    if raw_dir is not None:
        raw_dir.mkdir(parents=True, exist_ok=True)
        for name, rows in (("saturation", before), ("overload", attack_results), ("recovery", after)):
            write_results(sorted(rows, key=lambda r: r.seq), raw_dir / f"{name}.jsonl")
    ok = [r for r in attack_results if _ok(r)]
    first = min(r.timestamp for r in attack_results)
    last = max(r.timestamp for r in attack_results)
    goodput = len(ok) / max(last - first, 1e-9)  # 2xx per second of the attack's schedule
    settled = memory.at(first + config.settle_seconds)
    shed = [r for r in attack_results if r.code in SHED_CODES]
    front_per_ok = (cpu_saturated[1] - cpu_start[1]) / max(len([r for r in before if _ok(r)]), 1)
    front_overload = cpu_overload[1] - cpu_saturated[1]
    end = memory.samples[-1][1]
    report = OverloadReport(
        saturated_rate=rate,
        offered_rate=offered,
        codes=dict(Counter(str(r.code) for r in attack_results)),
        goodput=goodput,
        goodput_ratio=goodput / rate,
        admitted_p50_ms=_percentile_ms(ok, 50),
        admitted_p99_ms=_percentile_ms(ok, 99),
        shed_without_retry_after=sum(1 for r in attack_results if r.code in SHED_CODES and not r.retry_after),
        rss_settled=settled,
        rss_end=end,
        rss_max_growth=_rss_growth(settled, end),
        recovery_seconds=recovery_time(after, attack_end, rate),
        front_cpu_us_per_ok=front_per_ok * 1e6,
        front_cpu_us_per_shed=(front_overload - len(ok) * front_per_ok) / max(len(shed), 1) * 1e6,
        server_cpu_overload=(cpu_overload[0] - cpu_saturated[0]) / stats.wall_seconds,
        generator_lag_ms=stats.max_lag * 1000,
        generator_cpu=stats.cpu_busy,
        timeline=timeline(attack_results + after, first, 1.0, memory),
    )
    report.verdicts = judge(config, report)
    return report


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
    start = time.time()
    with MemorySampler(stack, every=min(10.0, config.soak_bin_seconds)) as memory:
        engine.attack(spec, results.append, processes=config.procs)
    ok = [r for r in results if _ok(r)]
    return SoakReport(
        rate=rate,
        seconds=config.soak_seconds,
        requests=len(results),
        codes=dict(Counter(str(r.code) for r in results)),
        p50_ms=_percentile_ms(ok, 50),
        p99_ms=_percentile_ms(ok, 99),
        rss_start_mb=sum(memory.samples[0][1].values()) / 2**20,
        rss_end_mb=sum(memory.samples[-1][1].values()) / 2**20,
        timeline=timeline(results, start, config.soak_bin_seconds, memory),
    )


def markdown(config: OverloadConfig, report: OverloadReport, soaked: SoakReport | None) -> str:
    lines = [
        f"# Overload: STACK={config.stack} WORKERS={config.workers}",
        "",
        f"Saturated (closed loop, {config.concurrency} workers, {config.saturate_seconds:g} s): "
        f"**{report.saturated_rate:.1f} req/s**. Overload: open loop at {report.offered_rate:.1f} req/s "
        f"({config.factor:g}x) for {config.overload_seconds:g} s. The generator's worst lag behind its schedule "
        f"was {report.generator_lag_ms:.0f} ms; it used {report.generator_cpu:.0%} of a CPU, the servers "
        f"{report.server_cpu_overload:.2f} CPUs. The front's CPU: {report.front_cpu_us_per_ok:.0f} us per 2xx at "
        f"saturation, about {report.front_cpu_us_per_shed:.0f} us per refusal during the overload.",
        "",
        "| check | result | figures |",
        "|---|---|---|",
    ]
    lines += [f"| {v.name} | {'pass' if v.passed else '**FAIL**'} | {v.detail} |" for v in report.verdicts]
    lines += ["", "![overload](overload.png)", ""]
    if soaked is not None:
        lines += [
            f"## Soak: {soaked.seconds / 60:g} min at {soaked.rate:.1f} req/s "
            f"({config.soak_fraction:.0%} of saturated)",
            "",
            f"{soaked.requests} requests; codes "
            + ", ".join(f"{n} x {c}" for c, n in sorted(soaked.codes.items()))
            + f"; p50 {soaked.p50_ms:.1f} ms, p99 {soaked.p99_ms:.1f} ms; resident memory of the stack "
            f"{soaked.rss_start_mb:.0f} MB at the start, {soaked.rss_end_mb:.0f} MB at the end.",
            "",
            "![soak](soak.png)",
            "",
        ]
    return "\n".join(lines)


def run(config: OverloadConfig, model_dir: Path, out: Path) -> tuple[OverloadReport, Path]:
    """Bring the stack up, overload it (and soak it when asked), write OUT/report.md, report.json and charts."""
    from loadtest.plots import timeline_chart

    out.mkdir(parents=True, exist_ok=True)
    with running_stack(config.stack, model_dir, workers=config.workers, batching=config.batching) as stack:
        report = overload(config, stack, out / "raw")
        for verdict in report.verdicts:
            mark = "[green]pass[/]" if verdict.passed else "[bold red]FAIL[/]"
            console.print(f"{mark} {verdict.name}: {verdict.detail}")
        soaked = None
        if config.soak_seconds > 0:
            rate = round(config.soak_fraction * report.saturated_rate, 1)
            console.print(f"soak: {config.soak_seconds / 60:g} min at {rate:.1f} req/s")
            soaked = soak(config, stack, rate)
    timeline_chart(report.timeline, f"Overload at {report.offered_rate:.0f} req/s", out / "overload.png")
    if soaked is not None:
        timeline_chart(soaked.timeline, f"Soak at {soaked.rate:.0f} req/s", out / "soak.png")
    data = {"config": asdict(config), "overload": asdict(report), "soak": asdict(soaked) if soaked else None}
    (out / "report.json").write_text(json.dumps(data, indent=2))
    (out / "report.md").write_text(markdown(config, report, soaked))
    return report, out
