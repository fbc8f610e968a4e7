"""The per-request metrics' tally (`observability.tally`): what a flush writes is what the same calls straight to
prometheus_client would have written, sample for sample; a read of the default registry, `/metrics`, the edge once
its worker is idle and the lifespan's timer each flush it."""

import asyncio
import math

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from observability import metrics
from observability.tally import TALLY, Tally, flush_while
from services.api.admission import Gate
from services.api.edge import Edge
from services.api.lifetime import Lifetimes

VALUES = [0.0, 0.0001, 0.00011, 0.5, 0.75, 30.0, 31.0, math.inf, -1.0, 0.003, 0.003, 1e-9]


def samples(registry: CollectorRegistry) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def family(registry: CollectorRegistry):
    counter = Counter("unit_things", "things", ["kind"], registry=registry)
    gauge = Gauge("unit_level", "level", registry=registry)
    histogram = Histogram("unit_seconds", "seconds", ["kind"], buckets=metrics.LATENCY_BUCKETS, registry=registry)
    return counter, gauge, histogram


def test_a_flush_writes_the_samples_direct_calls_would():
    direct, tallied = CollectorRegistry(), CollectorRegistry()
    counter, gauge, histogram = family(direct)
    t_counter, t_gauge, t_histogram = family(tallied)
    tally = Tally()
    for index, value in enumerate(VALUES):
        kind = "ab"[index % 2]
        histogram.labels(kind).observe(value)
        tally.observe(t_histogram.labels(kind), value)
        counter.labels(kind).inc(index)
        tally.inc(t_counter.labels(kind), index)
        gauge.inc(1 if index % 3 else -1)
        tally.inc(t_gauge, 1 if index % 3 else -1)
    histogram.labels("many").observe(2.0), histogram.labels("many").observe(0.02)
    tally.observe_many(t_histogram.labels("many"), [2.0, 0.02])
    assert samples(tallied) != samples(direct), "nothing is written before the flush"
    tally.flush()
    assert samples(tallied) == samples(direct)
    tally.flush()
    assert samples(tallied) == samples(direct), "a flush writes each amount once"


def test_a_nan_counts_in_the_sum_and_in_no_bucket_as_observe_does():
    direct, tallied = CollectorRegistry(), CollectorRegistry()
    Histogram("unit_nan", "nan", registry=direct).observe(math.nan)
    tally = Tally()
    tally.observe(Histogram("unit_nan", "nan", registry=tallied), math.nan)
    tally.flush()
    left, right = samples(direct), samples(tallied)
    assert left.keys() == right.keys()
    for key, value in left.items():
        assert value == right[key] or (math.isnan(value) and math.isnan(right[key])), key


def test_the_default_registry_is_read_after_a_flush():
    name = "serving_stage_duration_seconds_count"
    before = REGISTRY.get_sample_value(name, {"stage": "unit-tally"}) or 0.0
    with metrics.stage("unit-tally"):
        pass
    TALLY.observe(metrics.child(metrics.STAGE_LATENCY, "unit-tally"), 0.2)
    assert REGISTRY.get_sample_value(name, {"stage": "unit-tally"}) == before + 2
    assert f'{name}{{stage="unit-tally"}} {before + 2}'.encode() in metrics.metrics_payload()[0]


def test_the_edge_flushes_once_its_worker_is_idle():
    """While a request is in flight the tally holds what a finished one recorded; the last one out writes it."""
    registry = CollectorRegistry()
    counter = Counter("unit_served", "served", registry=registry)
    release = asyncio.Event()

    async def app(scope, receive, send):
        TALLY.inc(counter)
        if scope["path"] == "/held":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def call(edge, path):
        async def send(message): ...

        await edge({"type": "http", "method": "GET", "path": path, "headers": []}, None, send)

    async def scenario():
        edge = Edge(app, "unit", Gate(4), Lifetimes(60.0))
        held = asyncio.create_task(call(edge, "/held"))
        await asyncio.sleep(0)
        await call(edge, "/quick")
        busy = registry.get_sample_value("unit_served_total")
        release.set()
        await held
        return busy, registry.get_sample_value("unit_served_total")

    busy, idle = asyncio.run(scenario())
    assert (busy, idle) == (0.0, 2.0)


def test_the_lifespans_timer_flushes_while_requests_run():
    registry = CollectorRegistry()
    counter = Counter("unit_timed", "timed", registry=registry)

    async def scenario():
        timer = asyncio.create_task(flush_while(0.01))
        TALLY.inc(counter, 3)
        await asyncio.sleep(0.1)  # several intervals, even on a loaded host
        timer.cancel()
        return registry.get_sample_value("unit_timed_total")

    assert asyncio.run(scenario()) == pytest.approx(3.0)
