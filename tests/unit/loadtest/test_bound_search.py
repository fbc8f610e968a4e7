"""The search for the highest rate under a latency bound, against targets whose capacity is known: a queue whose p99
grows as the offered rate nears its capacity, a target that sheds, one that misses the bound at any rate."""

import pytest

from loadtest.bound_search import Probe, search


def queue(capacity: float, service_ms: float = 5.0, calls: list | None = None):
    """An M/M/1-like target: p99 = service time x ln(100) / (1 - load), unbounded at and past capacity."""

    def probe(rate: float) -> Probe:
        if calls is not None:
            calls.append(rate)
        load = rate / capacity
        p99 = service_ms * 4.6 / (1 - load) if load < 1 else 1e9
        return Probe(rate, p99, 1.0, rate if load < 1 else capacity)

    return probe


def rate_at_bound(capacity: float, bound_ms: float, service_ms: float = 5.0) -> float:
    """The rate where the queue's p99 equals the bound exactly."""
    return capacity * (1 - service_ms * 4.6 / bound_ms)


@pytest.mark.parametrize("start", [10.0, 300.0, 5000.0])
def test_the_search_finds_the_rate_at_the_bound_from_below_and_from_above(start):
    result = search(queue(1000.0), 250.0, start, probes=20, precision=0.02)
    best = result.best
    truth = rate_at_bound(1000.0, 250.0)
    assert best is not None and best.meets(250.0)
    assert truth * 0.98 <= best.rate <= truth, f"{best.rate} against {truth:.1f} from {start}"


def test_a_tighter_bound_gives_a_lower_rate():
    loose = search(queue(1000.0), 250.0, 500.0, probes=12).best.rate
    tight = search(queue(1000.0), 40.0, 500.0, probes=12).best.rate
    assert tight < loose
    assert tight == pytest.approx(rate_at_bound(1000.0, 40.0), rel=0.06)


def test_the_budget_of_probes_is_kept_and_the_best_so_far_returned():
    calls = []
    result = search(queue(1000.0, calls=calls), 250.0, 100.0, probes=4)
    assert len(calls) == 4 == len(result.probes)
    assert calls == [100.0, 150.0, 225.0, 337.5], "grows by 1.5 until the bound is bracketed"
    assert result.best.rate == 337.5


def test_it_stops_once_met_and_missed_are_within_the_precision():
    calls = []
    search(queue(1000.0, calls=calls), 250.0, 900.0, probes=50, precision=0.05)
    assert len(calls) < 12, calls


def test_a_target_that_sheds_does_not_meet_the_bound_however_fast_its_answers():
    def shedding(rate: float) -> Probe:
        return Probe(rate, 5.0, 1.0 if rate <= 200 else 200 / rate, min(rate, 200.0))

    best = search(shedding, 250.0, 100.0, probes=15, precision=0.02).best
    assert 196 <= best.rate <= 200


def test_no_rate_meets_a_bound_below_the_service_time():
    result = search(queue(1000.0, service_ms=50.0), 10.0, 100.0, probes=30)
    assert result.best is None
    assert min(p.rate for p in result.probes) == 1.0, "shrinks down to the least rate, then stops"
    assert len(result.probes) < 30


def test_the_probes_after_the_first_miss_bisect_between_met_and_missed():
    calls = []
    search(queue(1000.0, calls=calls), 250.0, 2000.0, probes=6)
    assert calls[:3] == [2000.0, 1333.3, 888.9], "shrinks by 1.5 until a rate meets the bound"
    assert calls[3] == round((888.9 + 1333.3) / 2, 1)


@pytest.mark.parametrize("kwargs", [{"bound_ms": 0}, {"start": 0}, {"probes": 0}, {"step": 1.0}])
def test_impossible_settings_are_refused(kwargs):
    arguments = {"bound_ms": 250.0, "start": 100.0} | kwargs
    bound, start = arguments.pop("bound_ms"), arguments.pop("start")
    with pytest.raises(ValueError):
        search(queue(1000.0), bound, start, **arguments)
