"""Declared variables: where a value comes from, and the bounds on what becomes a series."""

from prometheus_client import REGISTRY

from services.monitoring import statistics
from services.monitoring.statistics import EndpointMetrics, Variable


def sample(name: str, labels: dict) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_lookup_order_is_collected_then_response_then_request():
    assert statistics.lookup("x", {"x": 1}, {"x": 2}, {"x": 3}) == 1
    assert statistics.lookup("x", {}, {"x": 2}, {"x": 3}) == 2
    assert statistics.lookup("x", {}, {"y": 2}, {"x": 3}) == 3
    assert statistics.lookup("x", {}, [1, 2], "text") is None


def test_enum_values_outside_the_declared_ones_count_as_other():
    declared = EndpointMetrics(variables={"lang": Variable(kind="enum", values=["en"])})
    for lang in ("en", "fr", "xx-" * 50):
        statistics.record("unit", "1", declared, {"lang": lang}, None, None)
    name = statistics.metric_name("unit", "lang") + "_total"
    assert sample(name, {"version": "1", "value": "en"}) == 1
    assert sample(name, {"version": "1", "value": "other"}) == 2


def test_log_frequency_zero_records_nothing_and_undeclared_values_are_only_counted():
    declared = EndpointMetrics(variables={"n": Variable(kind="counter")}, log_frequency=0.0)
    statistics.record("unit-zero", "1", declared, {"n": 5, "surprise": 1}, None, None)
    assert sample(statistics.metric_name("unit-zero", "n") + "_total", {"version": "1"}) == 0
    assert sample("serving_custom_undeclared_total", {"endpoint": "unit-zero"}) == 1
