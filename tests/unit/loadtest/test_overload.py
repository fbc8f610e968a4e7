"""The overload's figures and verdicts without a stack: recovery time from completions, memory growth, the
timeline's bins, who had the CPU in a phase, each check passing and failing (goodput and p99 against the CPU the
stack could use), and the report that lists them."""

import math

import pytest

from loadtest.overload.config import OverloadConfig
from loadtest.overload.cpu import PhaseCpu, goodput_share, latency_share
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
    assert percentile_ms([result(0, latency_ms=v) for v in (10, 20, 30)], 50) == pytest.approx(20.0, rel=1e-3)
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


def cpus(stack: float, idle: float = 0.0, harness: float = 0.0, limit: float = 2.0) -> PhaseCpu:
    """A phase on 2 CPUs in which the stack used `stack`, `idle` sat idle, the load generator took `harness` and
    others the rest."""
    others = max(limit - stack - idle - harness, 0.0)
    return PhaseCpu(10.0, limit, stack, harness, others, 0.0, idle, min(stack + idle, limit))


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
        cpu_saturation=cpus(2.0),
        cpu_overload=cpus(2.0),
        generator_lag_ms=3.0,
    )
    return OverloadReport(**(figures | changes))


@pytest.mark.parametrize(
    ("changes", "failed"),
    [
        ({}, None),
        ({"codes": {"200": 900, "502": 1}}, "only 2xx, 429 and 503"),
        ({"shed_without_retry_after": 3}, "refusals carry Retry-After"),
        ({"admitted_p99_ms": 2500.0}, "admitted p99 bounded"),
        ({"goodput_ratio": 0.5}, "goodput >= 85% of saturated per CPU"),
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


def test_the_shares_are_what_the_stack_could_use_against_what_it_used_or_would_have_alone():
    assert goodput_share(cpus(2.0), cpus(0.92)) == pytest.approx(0.46)
    assert goodput_share(cpus(2.0), cpus(0.5, idle=1.5)) == 1.0, "idle CPU it did not take is no excuse"
    assert goodput_share(cpus(1.0), cpus(1.8)) == 1.0, "more CPU than at saturation is no more capacity shown"
    assert goodput_share(cpus(0.0), cpus(0.5)) == 1.0
    assert goodput_share(cpus(0.59), cpus(0.54, harness=0.9)) == pytest.approx(0.915, abs=0.001)
    assert latency_share(cpus(0.92)) == pytest.approx(0.46)
    assert latency_share(cpus(1.0, harness=0.5)) == pytest.approx(2 / 3), "the generator's CPU is not the stack's"
    assert latency_share(cpus(0.54, harness=0.9)) == pytest.approx(0.49, abs=0.001), "starved in both phases"
    assert latency_share(cpus(0.5, idle=1.0, harness=0.5)) == 1.0
    assert latency_share(cpus(0.0, harness=2.0)) == 1.0


def failed(config: OverloadConfig, overloaded: OverloadReport) -> list[str]:
    return [v.name for v in judge(config, overloaded) if not v.passed]


GOODPUT, P99 = "goodput >= 85% of saturated per CPU", "admitted p99 bounded"


def test_the_issues_run_passes_when_the_stack_got_046_of_the_cpu_it_used_at_saturation():
    """The issue's figures: 81% of the saturated rate and a p99 of 2,228 ms while the servers got 0.92 of a CPU
    (the rest taken by others), after reaching their saturated rate with 2.0; per CPU, the goodput held (176%) and
    the bound is 4,348 ms."""
    config = OverloadConfig()
    starved = report(
        goodput=81.0, goodput_ratio=0.81, admitted_p99_ms=2228.0, cpu_saturation=cpus(2.0), cpu_overload=cpus(0.92)
    )
    assert failed(config, starved) == []
    verdicts = {v.name: v.detail for v in judge(config, starved)}
    assert "81% raw, 176% per CPU" in verdicts[GOODPUT] and "0.92 CPUs during the overload" in verdicts[GOODPUT]
    assert "bound 4348 ms = 2000 ms / 0.46" in verdicts[P99]
    full = report(
        goodput=81.0, goodput_ratio=0.81, admitted_p99_ms=2228.0, cpu_saturation=cpus(2.0), cpu_overload=cpus(2.0)
    )
    assert failed(config, full) == [P99, GOODPUT], "the same figures with all its CPU fail, as they did"


@pytest.mark.parametrize(
    ("overload_cpu", "goodput_ratio", "p99_ms", "failures"),
    [
        (cpus(2.0), 0.5, 400.0, [GOODPUT]),  # a real collapse with all the CPU it used at saturation
        (cpus(2.0), 0.9, 2500.0, [P99]),  # slow with all its CPU
        (cpus(0.4, idle=1.6), 0.3, 400.0, [GOODPUT]),  # stalled with the CPU idle: not excused
        (cpus(0.4, idle=1.6), 0.9, 3000.0, [P99]),
        (cpus(0.2), 0.2, 7000.0, [GOODPUT]),  # 10% share: scaled to the 25% floor only (bar 21%, bound 8 s)
        (cpus(0.2), 0.22, 9000.0, [P99]),
        (cpus(1.0), 0.43, 3900.0, []),  # half the CPU: bar 42.5%, bound 4 s
        (cpus(1.0), 0.42, 4100.0, [P99, GOODPUT]),
        (cpus(1.0, harness=0.5), 0.9, 2900.0, []),  # 1 of the 1.5 CPUs the generator left: bound 3 s
        (cpus(1.0, harness=0.5), 0.9, 3100.0, [P99]),
    ],
)
def test_goodput_and_p99_are_judged_per_cpu_the_stack_could_use(overload_cpu, goodput_ratio, p99_ms, failures):
    overloaded = report(
        goodput_ratio=goodput_ratio, admitted_p99_ms=p99_ms, cpu_saturation=cpus(2.0), cpu_overload=overload_cpu
    )
    assert failed(OverloadConfig(), overloaded) == failures


def test_a_run_starved_in_both_phases_is_judged_on_what_it_had():
    """A run on this 2-core machine with a load average of 8: the stack used 0.59 CPUs to reach its saturated rate
    and could use 0.54 during the overload, the generator 0.9: p99 4,251 ms failed the fixed 2,500 ms bound."""
    starved = report(
        goodput_ratio=0.8, admitted_p99_ms=4251.0, cpu_saturation=cpus(0.59), cpu_overload=cpus(0.54, harness=0.9)
    )
    assert failed(OverloadConfig(admitted_p99_bound_ms=2500), starved) == []
    assert failed(OverloadConfig(admitted_p99_bound_ms=2500), report(admitted_p99_ms=4251.0)) == [P99]


def test_the_report_shows_who_had_the_cpu_and_the_scaled_bars():
    config = OverloadConfig()
    overloaded = report(cpu_saturation=cpus(2.0), cpu_overload=cpus(0.92, harness=0.4))
    overloaded.verdicts = judge(config, overloaded)
    text = markdown(config, overloaded, None)
    assert "| saturation | 2.00 | 2.00 | 0.00 | 0.00 | 0.00 | 0.00 |" in text
    assert "| overload | 0.92 | 0.92 | 0.40 | 0.68 | 0.00 | 0.00 |" in text
    assert "could use (what it used plus what sat idle) 46% of the CPU it used at saturation" in text
    assert "bar 39% of the saturated rate" in text and "p99 bound is 3478 ms (2000 ms / 0.57)" in text
