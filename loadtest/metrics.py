"""The generator's own Prometheus metrics, served during attacks for Prometheus to scrape beside the services.

A private registry (not the process-global one); every series is labelled with its run: stack, workers, batching,
rate (0 for a closed loop). The latency histogram has the servers' bucket ladder, so the client's and the servers'
latency histograms compare bucket for bucket.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from loadtest.results import Result
from observability.metrics import LATENCY_BUCKETS

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
            buckets=LATENCY_BUCKETS,
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
