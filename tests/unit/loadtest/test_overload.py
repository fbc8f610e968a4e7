"""The overload's figures and verdicts without a stack: recovery time from completions, memory growth, the
timeline's bins, each check passing and failing, and the report that lists them."""

import math

import pytest

from loadtest.overload.config import OverloadConfig
from loadtest.overload.judge import OverloadReport, judge
from loadtest.overload.phases import SoakReport
from loadtest.overload.report import markdown
from loadtest.overload.sampling import MemorySampler, percentile_ms, recovery_time, rss_growth, saturated_rate, timeline
from loadtest.results import Result


def result(due: float, code: int = 200, latency_ms: float = 10.0) -> Result:
    return Result(seq=0, timestamp=due, latency=int(latency_ms * 1e6), code=code, bytes_in=0, bytes_out=0)


class FixedMemory:
    """A stack whose processes always hold the same memory (MemorySampler reads `rss()`)."""

    def rss(self) -> dict[str, int]:
        return {"gateway/python/1": 2**20, "triton/tritonserver/2": 3 * 2**20}


def test_recovery_is_the_end_of_the_first_window_at_90_percent_of_the_rate():
    slow = [result(100.0 + i * 0.5) for i in range(6)]  # 2/s for 3 s after the attack's end at 100
    fast = [result(103.0 + i * 0.1) for i in range(20)]  # then 10/s
    assert recovery_time(slow + fast, attack_end=100.0, rate=10.0) == pytest.approx(3.81, abs=0.01)
    assert recovery_time(slow, attack_end=100.0, rate=10.0) is None, "never back"
    assert recovery_time([], attack_end=100.0, rate=0.0) is None
    assert recovery_time([result(99.0 + i * 0.1) for i in range(20)], 100.0, 10.0) == 0.0, "never fell"


def test_rates_percentiles_and_growth():
    assert saturated_rate([result(0), result(0, code=429), result(0)], seconds=2) == 1.0
    assert percentile_ms([result(0, latency_ms=v) for v in (10, 20, 30)], 50) == pytest.approx(20.0)
    assert math.isnan(percentile_ms([], 99))
    assert rss_growth({"a": 100, "b": 200, "gone": 50}, {"a": 110, "b": 190, "new": 10}) == pytest.approx(0.1)
    assert rss_growth({}, {"a": 1}) == 0.0


def test_timeline_bins_codes_and_memory_and_drops_the_partial_last_bin():
    with MemorySampler(FixedMemory(), every=60) as memory:
        pass
    results = [result(0.2), result(0.4, code=429), result(0.6, code=500), result(1.1), result(1.2)]
    rows = timeline(results, start=0.0, bin_seconds=1.0, memory=memory)
    assert len(rows) == 1, "the second bin's middle (1.5 s) is past the last request (1.2 s)"
    assert rows[0] | {"p50_ms": 0, "p99_ms": 0} == {
        "t": 0.0,
        "ok_per_s": 1.0,
        "shed_per_s": 1.0,
        "errors_per_s": 1.0,
        "p50_ms": 0,
        "p99_ms": 0,
        "rss_mb": 4.0,
    }


def report(**changes) -> OverloadReport:
    figures = dict(
        saturated_rate=100.0,
        offered_rate=300.0,
        codes={"200": 900, "429": 2000},
        goodput=90.0,
        goodput_ratio=0.9,
        admitted_p50_ms=50.0,
        admitted_p99_ms=400.0,
        shed_without_retry_after=0,
        rss_settled={"a": 100},
        rss_end={"a": 105},
        rss_max_growth=0.05,
        recovery_seconds=1.5,
        front_cpu_us_per_ok=2000.0,
        front_cpu_us_per_shed=100.0,
        server_cpu_overload=1.9,
        generator_lag_ms=3.0,
        generator_cpu=0.4,
    )
    return OverloadReport(**(figures | changes))


@pytest.mark.parametrize(
    ("changes", "failed"),
    [
        ({}, None),
        ({"codes": {"200": 900, "502": 1}}, "only 2xx, 429 and 503"),
        ({"shed_without_retry_after": 3}, "refusals carry Retry-After"),
        ({"admitted_p99_ms": 2500.0}, "admitted p99 bounded"),
        ({"goodput_ratio": 0.5}, "goodput >= 85% of saturated"),
        ({"rss_max_growth": 0.2}, "memory within 10%"),
        ({"recovery_seconds": None}, "throughput back within 5 s"),
        ({"recovery_seconds": 6.0}, "throughput back within 5 s"),
    ],
)
def test_each_check_fails_alone(changes, failed):
    verdicts = judge(OverloadConfig(), report(**changes))
    assert [v.name for v in verdicts if not v.passed] == ([failed] if failed else [])


def test_the_report_lists_every_check_and_the_soak():
    config = OverloadConfig(soak_seconds=600)
    overloaded = report(codes={"200": 900, "0": 2})
    overloaded.verdicts = judge(config, overloaded)
    soaked = SoakReport(70.0, 600.0, 42000, {"200": 42000}, 20.0, 80.0, 500.0, 510.0, [])
    text = markdown(config, overloaded, soaked)
    assert "**100.0 req/s**" in text and "| only 2xx, 429 and 503 | **FAIL** | codes 2 x 0, 900 x 200 |" in text
    assert "| refusals carry Retry-After | pass |" in text
    assert "## Soak: 10 min at 70.0 req/s (70% of saturated)" in text and "![soak](soak.png)" in text
    assert "## Soak" not in markdown(config, overloaded, None)
