"""The generator's own Prometheus metrics, served during attacks for Prometheus to scrape beside the services.

A private registry (not the process-global one); every series is labelled with its run: stack, workers, batching,
rate (0 for a closed loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from loadtest.results import Result

# 250 us .. 60 s: sub-millisecond server overhead and multi-second queueing on one axis.
BUCKETS = (
    0.00025,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
    30.0,
    60.0,
)
LABELS = ("stack", "workers", "batching", "rate")


class GeneratorMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        names = list(LABELS)
        self.requests = Counter(
            "loadtest_requests_total", "Requests by status code", names + ["code"], registry=self.registry
        )
        self.latency = Histogram(
            "loadtest_latency_seconds",
            "Latency from the scheduled send time",
            names,
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.achieved = Gauge(
            "loadtest_achieved_rate", "Requests answered per second during the attack", names, registry=self.registry
        )
        self.target = Gauge(
            "loadtest_target_rate", "Requests per second asked (0: closed loop)", names, registry=self.registry
        )

    def serve(self, port: int) -> None:
        start_http_server(port, addr="127.0.0.1", registry=self.registry)

    def observer(self, labels: dict[str, str]) -> Callable[[Result], None]:
        """A callback for one attack's results, with that attack's labels."""
        values = {k: str(labels.get(k, "")) for k in LABELS}
        latency = self.latency.labels(**values)
        achieved = self.achieved.labels(**values)
        self.target.labels(**values).set(float(values["rate"] or 0))
        start, count = time.monotonic(), [0]

        def observe(result: Result) -> None:
            self.requests.labels(**values, code=str(result.code)).inc()
            latency.observe(result.latency / 1e9)
            count[0] += 1
            elapsed = time.monotonic() - start
            if elapsed > 0:
                achieved.set(count[0] / elapsed)

        return observe
