"""The overload's figures and the verdicts production asks for: only 2xx, 429 and 503 come back (the refusals with
Retry-After), the admitted requests' p99 stays bounded, goodput during the overload holds against the saturated
rate, every server process's resident memory stays within a band of its value once the attack has settled, and full
throughput is back within seconds of the attack's end.

Goodput and p99 are judged against the CPU the stack could use (`cpu`): with a share G of the CPU it used at
saturation, the goodput bar is G x 85% of the saturated rate (the same 85% per CPU); with a share L of the CPU it
would have had alone with its load generator, the p99 bound is 1/L x its bound (both shares at most 1, at least
`min_cpu_share`). A stack short of CPU because its neighbours took it is judged on what it did with what it had; one
that collapses or stalls with the CPU at its disposal (idle CPU counts as at its disposal) still fails."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtest.overload.config import SHED_CODES, OverloadConfig
from loadtest.overload.cpu import PhaseCpu, goodput_share, latency_share


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
    """Status code (as text, 0 for no answer) -> count, during the overload."""
    goodput: float
    """2xx per second of the attack's schedule."""
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
    cpu_saturation: PhaseCpu
    """Who had the CPU while the saturated rate was measured."""
    cpu_overload: PhaseCpu
    """Who had the CPU during the overload."""
    generator_lag_ms: float
    verdicts: list[Verdict] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    @property
    def goodput_share(self) -> float:
        """The CPU the stack could use during the overload as a fraction of what it used at saturation."""
        return goodput_share(self.cpu_saturation, self.cpu_overload)

    @property
    def latency_share(self) -> float:
        """... as a fraction of what it would have had alone on this machine with its load generator."""
        return latency_share(self.cpu_overload)


def judge(config: OverloadConfig, report: OverloadReport) -> list[Verdict]:
    """One verdict per production check, in the order report.md lists them."""
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
        _p99(config, report),
        _goodput(config, report),
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


def _scale(config: OverloadConfig, share: float, why: str) -> tuple[float, str]:
    """The factor a bar is scaled by (the share, floored), and why, in words."""
    scale = max(share, config.min_cpu_share)
    if share >= 1:
        return 1.0, f"{why}: no allowance"
    floor = f", the floor {config.min_cpu_share:.0%}" if scale > share else ""
    return scale, f"{why}: {share:.0%}{floor}"


def _p99(config: OverloadConfig, report: OverloadReport) -> Verdict:
    over = report.cpu_overload
    why = f"the stack could use {over.available:.2f} CPUs of the {over.limit - over.harness:.2f} the generator left"
    scale, why = _scale(config, report.latency_share, why)
    bound = config.admitted_p99_bound_ms / scale
    return Verdict(
        "admitted p99 bounded",
        report.admitted_p99_ms <= bound,
        f"p99 {report.admitted_p99_ms:.0f} ms (bound {bound:.0f} ms = {config.admitted_p99_bound_ms:.0f} ms / "
        f"{scale:.2f}; {why}), p50 {report.admitted_p50_ms:.0f} ms",
    )


def _goodput(config: OverloadConfig, report: OverloadReport) -> Verdict:
    over, sat = report.cpu_overload, report.cpu_saturation
    why = f"the stack could use {over.available:.2f} CPUs during the overload, used {sat.stack:.2f} at saturation"
    scale, why = _scale(config, report.goodput_share, why)
    return Verdict(
        f"goodput >= {config.min_goodput_ratio:.0%} of saturated per CPU",
        report.goodput_ratio >= config.min_goodput_ratio * scale,
        f"{report.goodput:.1f} 2xx/s during the overload against {report.saturated_rate:.1f} saturated "
        f"({report.goodput_ratio:.0%} raw, {report.goodput_ratio / scale:.0%} per CPU; bar "
        f"{config.min_goodput_ratio * scale:.0%} raw; {why})",
    )
