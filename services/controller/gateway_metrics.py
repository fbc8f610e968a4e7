"""Where a rollout step's window comes from: the per-version counters of an endpoint summed over every gateway pod and
worker, so that the step is judged on the fleet's traffic, not on whichever pod a read reached.

- `PrometheusGatewayMetrics` (`CONTROLLER_PROMETHEUS_URL` set): as Flagger and Argo Rollouts do, Prometheus sums the
  series of every gateway it scrapes: `sum by (version, code)` of the requests counter and `sum by (version, le)` of
  the latency histogram's buckets, each the counter's growth over the step's window (`services.prometheus_api
  .increase_between`: exact counts, a restarted pod restarting only its own contribution). The p99 is then
  `histogram_quantile`'s interpolation over those summed buckets (`windows.quantile`, the same arithmetic). The
  baseline kept in the state is only a marker: the window is the time from the step's start to now.
- `HttpGatewayMetrics` (no Prometheus; `CONTROLLER_GATEWAY_URL`, a comma list): every gateway's /metrics (each
  already merged over its workers) read when the step starts, kept in the state per gateway, and read again when it is
  judged; the window is `windows.fleet_window` of the two readings. A gateway that cannot be read fails the step,
  which the controller retries with backoff: a window is never judged on part of the fleet.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from services.controller.settings import ControllerSettings
from services.lifecycle.ports import GatewayMetrics
from services.lifecycle.rollouts.windows import Snapshot, VersionCounters, fleet_window, parse_snapshot
from services.prometheus_api import PrometheusApi, selector

REQUESTS = "serving_endpoint_requests_total"
LATENCY_BUCKETS = "serving_endpoint_latency_seconds_bucket"
PROMETHEUS_MARK = {"source": "prometheus"}


def read_metrics(url: str) -> str:
    answer = httpx.get(f"{url.rstrip('/')}/metrics", timeout=10)
    answer.raise_for_status()
    return answer.text


class FleetMetrics:
    """Windows from readings of every gateway: `read(endpoint)` gives each gateway's snapshot (gateway -> counters)."""

    def __init__(self, read: Callable[[str], dict[str, Snapshot]]):
        self.read = read

    def mark(self, endpoint: str) -> dict:
        return {"gateways": {gateway: snapshot.model_dump() for gateway, snapshot in self.read(endpoint).items()}}

    def window(self, endpoint: str, baseline: dict, started: float, now: float) -> Snapshot | None:
        gateways = baseline.get("gateways") if isinstance(baseline, dict) else None
        if not isinstance(gateways, dict):
            return None  # marked by another source (Prometheus, or an earlier release's one-gateway snapshot)
        before = {gateway: Snapshot.model_validate(snapshot) for gateway, snapshot in gateways.items()}
        return fleet_window(before, self.read(endpoint))


class HttpGatewayMetrics(FleetMetrics):
    """Every gateway's own /metrics, read over HTTP."""

    def __init__(self, gateway_urls: list[str], fetch: Callable[[str], str] = read_metrics):
        self.urls, self.fetch = list(gateway_urls), fetch
        super().__init__(lambda endpoint: {url: parse_snapshot(self.fetch(url), endpoint) for url in self.urls})


class PrometheusGatewayMetrics:
    """The fleet's counters as Prometheus sums them over every gateway it scrapes."""

    def __init__(self, prometheus: PrometheusApi):
        self.prometheus = prometheus

    def mark(self, endpoint: str) -> dict:
        return dict(PROMETHEUS_MARK)

    def window(self, endpoint: str, baseline: dict, started: float, now: float) -> Snapshot | None:
        requests = selector(REQUESTS, endpoint=endpoint)
        buckets = selector(LATENCY_BUCKETS, endpoint=endpoint)
        observed = Snapshot()
        for (version, code), count in self.prometheus.summed_increase(requests, "version, code", started, now).items():
            counters = observed.versions.setdefault(version, VersionCounters())
            counters.requests += count
            if code.startswith("5"):
                counters.errors += count
        for (version, le), count in self.prometheus.summed_increase(buckets, "version, le", started, now).items():
            counters = observed.versions.setdefault(version, VersionCounters())
            counters.buckets[le] = count
        return observed


def gateway_metrics(settings: ControllerSettings) -> GatewayMetrics:
    """Prometheus when one is configured, else every gateway the settings name."""
    if settings.prometheus_url:
        return PrometheusGatewayMetrics(PrometheusApi(settings.prometheus_url))
    return HttpGatewayMetrics(settings.gateway_urls)
