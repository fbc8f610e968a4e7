"""The fleet judged from a real Prometheus scraping two real gateways (one with two workers, one with one) in front of a
real Triton, every second: a rollout window is exactly the sum of both gateways' counts, a restarted exporter restarts
only its own contribution, and the controller's fleet drift monitor raises the drift score and its alert from the
endpoint's data merged across all three workers, with the traffic one worker alone needed before
(`test_monitoring.test_shifted_traffic_raises_the_drift_score_and_the_alert_fires`: 200 + 200 + 200 texts)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily

from loadtest import engine
from loadtest.sentences import short
from loadtest.targets import build_targets
from services.controller.gateway_metrics import (
    LATENCY_BUCKETS,
    HttpGatewayMetrics,
    PrometheusGatewayMetrics,
)
from services.controller.settings import FleetDriftSettings
from services.launcher import Launcher, free_port
from services.lifecycle.rollouts.windows import quantile
from services.monitoring.fleet_counts import FleetFeatureCounts
from services.monitoring.fleet_drift import FleetDrift
from services.prometheus import prometheus_process
from services.prometheus_api import PrometheusApi, increase_between, selector
from services.triton.repository import RenderOptions
from tests.support.hosts import FLEET_GATEWAY_ENV, prometheus_config, prometheus_rules
from tests.support.servers import Server, start_gateway, start_triton

DRIFT = FleetDriftSettings(reference_size=200, window_size=200, min_samples=100, interval=0.5)
SCRAPE = 1.0


class Restarting:
    """An exporter whose requests counter the test sets, to restart it (counters back to zero) at will."""

    def __init__(self):
        self.counts: dict[str, float] = {}

    def collect(self):
        family = CounterMetricFamily("serving_endpoint_requests", "requests", labels=["endpoint", "version", "code"])
        for code, value in self.counts.items():
            family.add_metric(["restarts", "1", code], value)
        yield family


@dataclass
class Fleet:
    gateways: list[Server]
    prometheus: PrometheusApi
    restarting: Restarting
    drift: FleetDrift


def config(gateways: list[Server], exporter_port: int, controller_port: int) -> str:
    """The project's Prometheus configuration, scraping every second: both gateways and the restarting exporter as
    the `serving` job, the fleet drift monitor as the `controller` job; the other jobs left out."""
    serving = [g.url.removeprefix("http://") for g in gateways] + [f"127.0.0.1:{exporter_port}"]
    return yaml.safe_dump(prometheus_config(serving, [f"127.0.0.1:{controller_port}"], SCRAPE))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, tiny_model) -> Iterator[Fleet]:
    base = tmp_path_factory.mktemp("fleet")
    with ExitStack() as running:
        triton = start_triton(base / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",))
        running.callback(triton.stop)
        gateways = []
        for name, workers in (("a", 2), ("b", 1)):
            (base / name).mkdir()
            gateways.append(start_gateway(base / name, tiny_model, triton, workers=workers, env=FLEET_GATEWAY_ENV))
            running.callback(gateways[-1].launcher.stop_all)
        restarting, exporter = Restarting(), CollectorRegistry()
        exporter.register(restarting)
        exporter_port, controller_port, port = free_port(), free_port(), free_port()
        for server, _ in (start_http_server(exporter_port, "127.0.0.1", exporter),):
            running.callback(server.shutdown)
        prometheus = PrometheusApi(f"http://127.0.0.1:{port}")
        registry = CollectorRegistry()
        drift = FleetDrift(FleetFeatureCounts(prometheus).read, DRIFT, registry=registry)
        server, _ = start_http_server(controller_port, "127.0.0.1", registry)
        running.callback(server.shutdown)
        (base / "prometheus.yml").write_text(config(gateways, exporter_port, controller_port))
        (base / "rules.yml").write_text(prometheus_rules())
        launcher = Launcher(base)
        running.callback(launcher.stop_all)
        launcher.start_ready(prometheus_process(base / "prometheus.yml", base / "data", port), detach=True, timeout=60)
        # Prometheus starts scraping some seconds after it says ready (its target discovery is throttled)
        wait_for(
            lambda: len(prometheus.query("up == 1", time.time())) == 4, 30, lambda: prometheus.query("up", time.time())
        )
        yield Fleet(gateways, prometheus, restarting, drift)


def send(urls: list[str], texts: list[str], rate: float | None = None) -> dict[str, int]:
    """`texts` sent round-robin over the gateways, one a request; how many each answered with 200."""
    targets = [target for url in urls for target in build_targets(url, "serve", texts[urls.index(url) :: len(urls)])]
    answered = {url: 0 for url in urls}

    def count(result) -> None:
        if result.code == 200:
            answered[next(u for u in urls if targets[result.seq].url.startswith(u))] += 1

    spec = engine.AttackSpec(targets=targets, rate=rate, concurrency=8, duration=None, requests=len(targets))
    engine.attack(spec, count)
    return answered


def scraped() -> float:
    """A moment after which every gateway has been scraped once more: what happened before now is in Prometheus."""
    time.sleep(2.2 * SCRAPE)
    return time.time()


def test_a_rollout_window_from_prometheus_is_the_sum_of_both_gateways_counts(fleet):
    urls = [g.url for g in fleet.gateways]
    send(urls, short(20, seed=5))  # every series exists before the window
    started = scraped()
    http = HttpGatewayMetrics(urls)
    mark = http.mark("minilm")
    answered = send(urls, short(90, seed=6))
    now = scraped()
    from_prometheus = PrometheusGatewayMetrics(fleet.prometheus).window("minilm", {}, started, now)
    from_gateways = http.window("minilm", mark, started, now)
    (version,) = from_prometheus.versions
    counted = from_prometheus.versions[version]
    p99 = quantile(0.99, counted.buckets)
    summed = f"sum by (le) ({increase_between(selector(LATENCY_BUCKETS, endpoint='minilm'), now - started)})"
    (promql_p99,) = fleet.prometheus.query(f"histogram_quantile(0.99, {summed})", now)
    print(
        f"\nrollout window of {now - started:.1f}s: gateways answered {answered}; Prometheus' sum "
        f"{counted.requests:.0f} requests, {counted.errors:.0f} errors; the gateways' own /metrics "
        f"{from_gateways.versions[version].requests:.0f}; p99 {p99 * 1000:.2f} ms (histogram_quantile: "
        f"{promql_p99[1] * 1000:.2f} ms)"
    )
    assert counted.requests == sum(answered.values()) == 90 and counted.errors == 0
    assert from_gateways.versions[version] == counted, "requests, errors and every latency bucket"
    assert p99 == pytest.approx(promql_p99[1], rel=1e-9)


def test_an_exporter_that_restarts_restarts_only_its_own_contribution(fleet):
    exporter = fleet.restarting
    exporter.counts = {"200": 100.0}
    started = scraped()
    exporter.counts = {"200": 130.0}
    time.sleep(2.2 * SCRAPE)
    exporter.counts = {"200": 4.0}  # restarted: counted again from zero
    time.sleep(2.2 * SCRAPE)
    exporter.counts = {"200": 9.0, "503": 3.0}  # a series born inside the window: all of it is the window's
    now = scraped()
    observed = PrometheusGatewayMetrics(fleet.prometheus).window("restarts", {}, started, now).versions["1"]
    extrapolated = fleet.prometheus.query(
        f'sum(increase(serving_endpoint_requests_total{{endpoint="restarts"}}[{round((now - started) * 1000)}ms]))', now
    )
    print(
        f"\nrestarting exporter: window {observed.requests:.0f} requests, {observed.errors:.0f} errors "
        f"(increase() would say {extrapolated[0][1]:.1f})"
    )
    assert (observed.requests, observed.errors) == (12, 3), "9 since the restart, and the 3 errors of a new series"


def score(fleet: Fleet, job: str = "controller") -> float | None:
    found = fleet.prometheus.query(
        f'serving_drift_score{{job="{job}",endpoint="minilm",feature="token_length",method="psi"}}', time.time()
    )
    return found[0][1] if found else None


def wait_for(condition, seconds: float, what) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.5)
