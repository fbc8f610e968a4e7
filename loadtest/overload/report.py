"""report.md of an overload run (and of its soak): the saturated and offered rates, what the generator and the
servers spent, one row per check, and the charts."""

from __future__ import annotations

from loadtest.overload.config import OverloadConfig
from loadtest.overload.cpu import PhaseCpu
from loadtest.overload.judge import OverloadReport
from loadtest.overload.phases import SoakReport


def markdown(config: OverloadConfig, report: OverloadReport, soaked: SoakReport | None) -> str:
    lines = [
        f"# Overload: STACK={config.stack} WORKERS={config.workers}",
        "",
        f"Saturated (closed loop, {config.concurrency} workers, {config.saturate_seconds:g} s): "
        f"**{report.saturated_rate:.1f} req/s**. Overload: open loop at {report.offered_rate:.1f} req/s "
        f"({config.factor:g}x) for {config.overload_seconds:g} s. The generator's worst lag behind its schedule "
        f"was {report.generator_lag_ms:.0f} ms. The front's CPU: {report.front_cpu_us_per_ok:.0f} us per 2xx at "
        f"saturation, about {report.front_cpu_us_per_shed:.0f} us per refusal during the overload.",
        "",
        *_cpu_section(config, report),
        "| check | result | figures |",
        "|---|---|---|",
    ]
    lines += [f"| {v.name} | {'pass' if v.passed else '**FAIL**'} | {v.detail} |" for v in report.verdicts]
    lines += ["", "![overload](overload.png)", ""]
    if soaked is not None:
        lines += _soak_section(config, soaked)
    return "\n".join(lines)


def _cpu_section(config: OverloadConfig, report: OverloadReport) -> list[str]:
    """Who had the CPU in each phase, and how that scaled the goodput bar and the p99 bound."""
    goodput = max(report.goodput_share, config.min_cpu_share)
    latency = max(report.latency_share, config.min_cpu_share)

    def row(name: str, phase: PhaseCpu) -> str:
        return (
            f"| {name} | {phase.stack:.2f} | {phase.available:.2f} | {phase.harness:.2f} | {phase.others:.2f} | "
            f"{phase.steal:.2f} | {phase.idle:.2f} |"
        )

    return [
        f"CPUs (CPU seconds per second; this machine allows {report.cpu_overload.limit:g}):",
        "",
        "| phase | stack | stack could use | load generator | others | steal | idle |",
        "|---|---|---|---|---|---|---|",
        row("saturation", report.cpu_saturation),
        row("overload", report.cpu_overload),
        "",
        f"During the overload the stack could use (what it used plus what sat idle) {report.goodput_share:.0%} "
        f"of the CPU it used at saturation: goodput is judged per CPU (bar {config.min_goodput_ratio * goodput:.0%} "
        f"of the saturated rate, raw); and {report.latency_share:.0%} of what it would have had alone with the "
        f"load generator: the p99 bound is {config.admitted_p99_bound_ms / latency:.0f} ms "
        f"({config.admitted_p99_bound_ms:.0f} ms / {latency:.2f}). Shares below {config.min_cpu_share:.0%} count "
        f"as {config.min_cpu_share:.0%}.",
        "",
    ]


def _soak_section(config: OverloadConfig, soaked: SoakReport) -> list[str]:
    return [
        f"## Soak: {soaked.seconds / 60:g} min at {soaked.rate:.1f} req/s ({config.soak_fraction:.0%} of saturated)",
        "",
        f"{soaked.requests} requests; codes "
        + ", ".join(f"{n} x {c}" for c, n in sorted(soaked.codes.items()))
        + f"; p50 {soaked.p50_ms:.1f} ms, p99 {soaked.p99_ms:.1f} ms; resident memory of the stack "
        f"{soaked.rss_start_mb:.0f} MB at the start, {soaked.rss_end_mb:.0f} MB at the end.",
        "",
        "![soak](soak.png)",
        "",
    ]
