"""Overload, short: the gateway stack (WORKERS=2, the real model) attacked open loop at 3x the saturated rate it
has just shown. Only 2xx, 429 and 503 come back, every refusal with Retry-After; the admitted requests' p99 stays
bounded by the in-flight bound; memory stays flat; full throughput is back within 5 s.

Who had the CPU in the saturated and the overloaded phase (the stack, the load generator, others, steal, idle) is
printed and checked to add up to the machine's CPUs; the p99 bound is judged against the CPU the stack could use.
Goodput is printed, not asserted to the issue's 85% (a speed goal on a shared 2-core machine where the generator
takes its share: `make soak` checks and charts it); asserted only not to collapse per CPU the stack could use, which
expensive refusals would cause. The full 60 s overload and the 30-minute soak are `make soak`.
"""

import os

import pytest

from loadtest.overload.config import OverloadConfig
from loadtest.overload.phases import overload
from loadtest.stackrun import running_stack

pytestmark = pytest.mark.serial  # it measures rates and latencies: `make test` runs it alone

SHORT = OverloadConfig(
    warmup_seconds=2,
    saturate_seconds=4,
    overload_seconds=10,
    settle_seconds=5,
    recovery_seconds=4,
    admitted_p99_bound_ms=2500,
)


def test_three_times_the_saturated_rate_is_shed_cleanly(real_model, tmp_path):
    with running_stack("clearml", real_model, workers=2) as stack:
        report = overload(SHORT, stack, tmp_path / "raw")
    for phase, cpu in (("saturation", report.cpu_saturation), ("overload", report.cpu_overload)):
        print(f"CPUs during the {phase} ({cpu.seconds:.1f} s): {cpu.describe()}")
        accounted = cpu.stack + cpu.harness + cpu.others + cpu.steal + cpu.idle
        assert accounted == pytest.approx(os.cpu_count(), rel=0.15), f"{phase}: {accounted:.2f} CPUs accounted for"
        assert 0 < cpu.stack <= cpu.limit * 1.05, f"{phase}: the stack used {cpu.stack:.2f} CPUs"
    print(
        f"the stack could use {report.goodput_share:.0%} of the CPU it used at saturation, "
        f"{report.latency_share:.0%} of what it would have had alone with the load generator; the generator fell "
        f"{report.generator_lag_ms:.0f} ms behind its schedule at most"
    )
    for verdict in report.verdicts:
        print(f"{'pass' if verdict.passed else 'FAIL'} {verdict.name}: {verdict.detail}")
    verdicts = {v.name: v for v in report.verdicts}
    for name in ("only 2xx, 429 and 503", "refusals carry Retry-After", "admitted p99 bounded"):
        assert verdicts[name].passed, verdicts[name].detail
    assert report.codes.get("429", 0) > 0, "3x the saturated rate must be shed, not queued"
    per_cpu = report.goodput_ratio / max(report.goodput_share, SHORT.min_cpu_share)
    assert per_cpu > 0.5, f"goodput collapsed under overload: {per_cpu:.0%} per CPU the stack could use"
    growth = {k: f"{report.rss_end[k] / v - 1:+.1%}" for k, v in report.rss_settled.items() if k in report.rss_end}
    assert verdicts["memory within 10%"].passed, sorted(growth.items(), key=lambda kv: kv[1])[-3:]
    assert verdicts["throughput back within 5 s"].passed, verdicts["throughput back within 5 s"].detail
    assert (tmp_path / "raw" / "overload.jsonl").stat().st_size > 0
