"""Rollout windows from per-version metrics summed over the fleet, computed by hand (the judgement of a window:
`test_judge.py`)."""

import pytest

from services.controller.gateway_metrics import HttpGatewayMetrics
from services.lifecycle.rollouts.windows import (
    Snapshot,
    VersionCounters,
    count_above,
    fleet_window,
    parse_snapshot,
    quantile,
    window,
)

METRICS = """
serving_endpoint_requests_total{code="200",endpoint="e",version="1"} 90.0
serving_endpoint_requests_total{code="503",endpoint="e",version="1"} 10.0
serving_endpoint_requests_total{code="422",endpoint="e",version="1"} 5.0
serving_endpoint_requests_total{code="200",endpoint="other",version="1"} 1000.0
serving_endpoint_latency_seconds_bucket{endpoint="e",le="0.01",version="1"} 50.0
serving_endpoint_latency_seconds_bucket{endpoint="e",le="0.02",version="1"} 100.0
serving_endpoint_latency_seconds_bucket{endpoint="e",le="+Inf",version="1"} 105.0
"""


def test_parse_counts_requests_5xx_errors_and_buckets_of_one_endpoint():
    counters = parse_snapshot(METRICS, "e").versions["1"]
    assert (counters.requests, counters.errors) == (105.0, 10.0), "4xx is not the version's error"
    assert counters.buckets == {"0.01": 50.0, "0.02": 100.0, "+Inf": 105.0}


def test_quantile_interpolates_inside_the_bucket():
    # rank 0.5 * 105 = 52.5 falls in (0.01, 0.02] holding counts 50..100: 0.01 + 0.01 * 2.5 / 50
    assert quantile(0.5, {"0.01": 50.0, "0.02": 100.0, "+Inf": 105.0}) == pytest.approx(0.0105)
    assert quantile(0.99, {"0.01": 0.0, "+Inf": 0.0}) is None


def test_window_is_the_difference_and_a_reset_is_noticed():
    before = Snapshot(versions={"1": VersionCounters(requests=10, errors=1, buckets={"+Inf": 10})})
    after = Snapshot(
        versions={
            "1": VersionCounters(requests=30, errors=1, buckets={"+Inf": 30}),
            "2": VersionCounters(requests=5, buckets={"+Inf": 5}),
        }
    )
    delta = window(before, after)
    assert delta.versions["1"].requests == 20 and delta.versions["1"].errors == 0
    assert delta.versions["2"].requests == 5
    assert window(after, before) is None


def test_count_above_interpolates_inside_the_bucket():
    buckets = {"0.01": 50.0, "0.02": 100.0, "+Inf": 105.0}
    assert count_above(0.015, buckets) == pytest.approx(105 - 75)
    assert count_above(0.02, buckets) == 5 and count_above(3.0, buckets) == 5, "the +Inf bucket is above any bound"
    assert count_above(0.0, buckets) == 105


def counts(requests: float, errors: float = 0.0) -> Snapshot:
    return Snapshot(versions={"2": VersionCounters(requests=requests, errors=errors, buckets={"+Inf": requests})})


def test_a_fleet_window_sums_every_gateway_and_a_restart_restarts_only_its_own_part():
    before = {"a": counts(100, 1), "b": counts(50), "gone": counts(7)}
    after = {"a": counts(130, 2), "b": counts(4), "joined": counts(3)}
    observed = fleet_window(before, after).versions["2"]
    # a: 30 more, 1 error; b restarted: its 4 since; joined: its 3; gone: nothing
    assert (observed.requests, observed.errors, observed.buckets) == (37, 1, {"+Inf": 37})


def test_every_gateway_named_is_read_and_summed():
    texts = {
        "http://a:8080": 'serving_endpoint_requests_total{code="200",endpoint="e",version="2"} %d\n',
        "http://b:8080": 'serving_endpoint_requests_total{code="500",endpoint="e",version="2"} %d\n',
    }
    served = {"http://a:8080": 10, "http://b:8080": 1}
    metrics = HttpGatewayMetrics(list(texts), fetch=lambda url: texts[url] % served[url])
    mark = metrics.mark("e")
    assert set(mark["gateways"]) == set(texts)
    served.update({"http://a:8080": 40, "http://b:8080": 4})
    observed = metrics.window("e", mark, 0.0, 10.0).versions["2"]
    assert (observed.requests, observed.errors) == (33, 3)
    assert metrics.window("e", {"versions": {}}, 0.0, 10.0) is None, "an earlier release's one-gateway baseline"
