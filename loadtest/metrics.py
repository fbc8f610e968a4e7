"""The generator's own Prometheus metrics, served during an attack for Prometheus to scrape beside the services.

A private registry (not the process-global one), labelled with the run: stack, workers, batching, rate.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from loadtest.results import Result

# 250 us .. 60 s: sub-millisecond server overhead and multi-second queueing on one axis.
BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
           1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
LABELS = ("stack", "workers", "batching", "rate")


class GeneratorMetrics:
    def __init__(self, labels: dict[str, str]):
        self.registry = CollectorRegistry()
        self.labels = {k: str(labels.get(k, "")) for k in LABELS}
        names = list(LABELS)
        self.requests = Counter("loadtest_requests_total", "Requests by status code", names + ["code"],
                                registry=self.registry)
        self.latency = Histogram("loadtest_latency_seconds", "Latency from the scheduled send time", names,
                                 buckets=BUCKETS, registry=self.registry)
        self.achieved = Gauge("loadtest_achieved_rate", "Requests sent per second so far", names,
                              registry=self.registry)
        self.target = Gauge("loadtest_target_rate", "Requests per second asked (0: closed loop)", names,
                            registry=self.registry)
        self._latency = self.latency.labels(**self.labels)
        self._start = time.monotonic()
        self._count = 0

    def serve(self, port: int) -> None:
        start_http_server(port, addr="127.0.0.1", registry=self.registry)

    def observe(self, result: Result) -> None:
        self.requests.labels(**self.labels, code=str(result.code)).inc()
        self._latency.observe(result.latency / 1e9)
        self._count += 1
        elapsed = time.monotonic() - self._start
        if elapsed > 0:
            self.achieved.labels(**self.labels).set(self._count / elapsed)
