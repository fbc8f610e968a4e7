from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from observability.metrics import LATENCY_BUCKETS, stage


def sample(name: str, stage_name: str) -> float:
    return REGISTRY.get_sample_value(name, {"stage": stage_name}) or 0.0


def test_stage_timer_observes_the_time_spent_even_when_the_stage_fails():
    count = sample("serving_stage_duration_seconds_count", "unit-stage")
    total = sample("serving_stage_duration_seconds_sum", "unit-stage")
    started = time.perf_counter()
    with stage("unit-stage"):
        time.sleep(0.02)
    with pytest.raises(RuntimeError), stage("unit-stage"):
        raise RuntimeError("boom")
    both = time.perf_counter() - started
    assert sample("serving_stage_duration_seconds_count", "unit-stage") == count + 2
    assert 0.02 <= sample("serving_stage_duration_seconds_sum", "unit-stage") - total <= both


def bucket_bounds(registry, name: str) -> list[float]:
    samples = [s for family in registry.collect() for s in family.samples if s.name == name]
    return sorted({float(s.labels["le"]) for s in samples})


def test_the_load_generator_and_the_servers_share_one_latency_bucket_ladder():
    from loadtest.metrics import GeneratorMetrics

    generator = GeneratorMetrics()
    generator.observer({"stack": "fastapi", "workers": "1", "batching": "on", "rate": "10"})
    with stage("unit-ladder"):
        pass
    client = bucket_bounds(generator.registry, "loadtest_latency_seconds_bucket")
    server = bucket_bounds(REGISTRY, "serving_stage_duration_seconds_bucket")
    assert client == server == [*LATENCY_BUCKETS, float("inf")]
