"""The overload's figures and the verdicts production asks for: only 2xx, 429 and 503 come back (the refusals with
Retry-After), the admitted requests' p99 stays bounded, goodput during the overload holds against the saturated
rate, every server process's resident memory stays within a band of its value once the attack has settled, and full
throughput is back within seconds of the attack's end."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtest.overload.config import SHED_CODES, OverloadConfig


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
    server_cpu_overload: float
    """CPUs busy in all server processes during the overload."""
    generator_lag_ms: float
    generator_cpu: float
    verdicts: list[Verdict] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)


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
