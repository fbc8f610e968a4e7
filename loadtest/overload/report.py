"""report.md of an overload run (and of its soak): the saturated and offered rates, what the generator and the
servers spent, one row per check, and the charts."""

from __future__ import annotations

from loadtest.overload.config import OverloadConfig
from loadtest.overload.judge import OverloadReport
from loadtest.overload.phases import SoakReport


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
        lines += _soak_section(config, soaked)
    return "\n".join(lines)


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
