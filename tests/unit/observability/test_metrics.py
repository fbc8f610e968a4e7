import time

import pytest
from prometheus_client import REGISTRY

from observability.metrics import stage


def sample(name: str, stage_name: str) -> float:
    return REGISTRY.get_sample_value(name, {"stage": stage_name}) or 0.0


def test_stage_timer_observes_the_time_spent_even_when_the_stage_fails():
    count = sample("serving_stage_duration_seconds_count", "unit-stage")
    total = sample("serving_stage_duration_seconds_sum", "unit-stage")
    with stage("unit-stage"):
        time.sleep(0.02)
    with pytest.raises(RuntimeError), stage("unit-stage"):
        raise RuntimeError("boom")
    assert sample("serving_stage_duration_seconds_count", "unit-stage") == count + 2
    assert 0.02 <= sample("serving_stage_duration_seconds_sum", "unit-stage") - total < 1.0
