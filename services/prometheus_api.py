"""Reading a Prometheus over its HTTP API (`/api/v1/query`): what the controller judges the fleet from (rollout windows,
`services.controller.gateway_metrics`; drift, `services.monitoring.fleet_drift`).

Both ask the same question of a counter: by how much did it grow between two instants, summed over every gateway pod
and worker that exports it. `increase_between` writes that in PromQL without `increase()`'s extrapolation (which
scales a window's counts by up to a scrape interval's share and, for a series born inside the window, leaves out what
its first sample already held, such as a new version's first errors): for each series, its value at the end minus its
value at the start; a series that did not exist at the start, or whose counter went back (its pod or worker restarted),
contributes what it holds at the end, counted from its restart. A pod that restarts thus restarts only its own
contribution, never the fleet's window, and consecutive windows that share their instants tile without gap or overlap.
"""

from __future__ import annotations

import json
import math

import httpx

from services.common.errors import ConfigurationError, Unavailable


def selector(metric: str, **labels: str) -> str:
    """`metric{label="value",...}` with each value quoted as PromQL reads it."""
    matchers = ",".join(f"{name}={json.dumps(value)}" for name, value in labels.items())
    return f"{metric}{{{matchers}}}" if matchers else metric


def increase_between(series: str, seconds: float | None) -> str:
    """Per series of the selector `series`, its growth over the last `seconds` before the query's time (see the module
    docstring); `seconds` None: its whole value."""
    if seconds is None:
        return series
    span = f"{max(1, math.ceil(seconds * 1000))}ms"
    grown = f"(({series} - {series} offset {span}) >= 0)"
    return f"({grown} unless (resets({series}[{span}]) > 0)) or {series}"


class PrometheusApi:
    """Instant queries against one Prometheus; a failure says which URL and why."""

    def __init__(self, url: str, timeout: float = 10.0):
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"Prometheus URL {url!r} must start with http:// or https://")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
        """The instant vector `expr` evaluated at time `at` (Unix seconds): (labels, value) per series."""
        try:
            answer = httpx.get(
                f"{self.url}/api/v1/query", params={"query": expr, "time": f"{at:.3f}"}, timeout=self.timeout
            )
            body = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise Unavailable(f"Prometheus at {self.url} did not answer: {exc}") from exc
        if body.get("status") != "success":
            raise Unavailable(f"Prometheus at {self.url} refused {expr!r}: {body.get('error', answer.text[:200])}")
        data = body["data"]
        if data["resultType"] != "vector":
            raise Unavailable(f"Prometheus at {self.url} answered a {data['resultType']} to {expr!r}")
        return [(item["metric"], float(item["value"][1])) for item in data["result"]]

    def summed_increase(self, series: str, by: str, since: float | None, at: float) -> dict[tuple, float]:
        """`sum by (by) (increase_between(series))` between `since` and `at`: label values (in the order of `by`) ->
        count."""
        names = [name.strip() for name in by.split(",")]
        expr = f"sum by ({by}) ({increase_between(series, None if since is None else at - since)})"
        return {tuple(labels.get(name, "") for name in names): value for labels, value in self.query(expr, at)}
