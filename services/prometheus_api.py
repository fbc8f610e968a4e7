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
import time
from urllib.parse import urlsplit

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


MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""The largest answer read from a Prometheus (a query over thousands of series runs to a few MB)."""


class PrometheusApi:
    """Queries against one Prometheus; a failure (no answer, an answer slower than `timeout` seconds in all or larger
    than `MAX_ANSWER_BYTES`, or not a Prometheus API answer) is `Unavailable`, saying which URL and why."""

    def __init__(self, url: str, timeout: float = 10.0):
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"Prometheus URL {url!r} must start with http:// or https://")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
        """The instant vector `expr` evaluated at time `at` (Unix seconds): (labels, value) per series."""
        data = self._get("query", expr, {"time": f"{at:.3f}"}, "vector")
        try:
            return [(labelset(item["metric"]), float(item["value"][1])) for item in data["result"]]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise Unavailable(f"Prometheus at {self.url} answered {expr!r} with a malformed vector: {exc!r}") from exc

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """`expr` evaluated every `step` seconds from `start` to `end` (Unix seconds): (labels, [(time, value)])
        per series; NaN and infinite values (a quantile of no observations) come back as float('nan')."""
        params = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        data = self._get("query_range", expr, params, "matrix")
        try:
            return [
                (labelset(item["metric"]), [(float(t), float(v)) for t, v in item["values"]]) for item in data["result"]
            ]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise Unavailable(f"Prometheus at {self.url} answered {expr!r} with a malformed matrix: {exc!r}") from exc

    def down_targets(self) -> list[tuple[str, str]]:
        """Each scrape target Prometheus last failed to scrape (`/api/v1/targets`): ("job address", why); an answer
        of another shape is `Unavailable`, as a query's is."""
        text = self._read(f"{self.url}/api/v1/targets", {"state": "active"})
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise Unavailable(f"Prometheus at {self.url} did not answer JSON: {text[:200]!r}") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            raise Unavailable(f"Prometheus at {self.url} refused its targets: {text[:200]!r}")
        data = body.get("data")
        targets = data.get("activeTargets") if isinstance(data, dict) else None
        if not isinstance(targets, list):
            raise Unavailable(f"Prometheus at {self.url} answered its targets without a list: {text[:200]!r}")
        down = []
        for item in targets:
            if not isinstance(item, dict) or item.get("health") != "down":
                continue
            labels = item.get("labels")
            job = labels.get("job", "?") if isinstance(labels, dict) else "?"
            address = urlsplit(str(item.get("scrapeUrl", ""))).netloc
            down.append((f"{str(job)[:100]} {address[:100]}", str(item.get("lastError") or "down")[:500]))
        return down

    def _get(self, api: str, expr: str, params: dict[str, str], result_type: str) -> dict:
        text = self._read(f"{self.url}/api/v1/{api}", {"query": expr, **params})
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise Unavailable(f"Prometheus at {self.url} did not answer JSON: {text[:200]!r}") from exc
        if not isinstance(body, dict):
            raise Unavailable(f"Prometheus at {self.url} did not answer an API object: {text[:200]!r}")
        if body.get("status") != "success":
            raise Unavailable(f"Prometheus at {self.url} refused {expr!r}: {str(body.get('error', text[:200]))[:500]}")
        data = body.get("data")
        if not isinstance(data, dict) or not isinstance(data.get("result"), list):
            raise Unavailable(f"Prometheus at {self.url} answered {expr!r} without a result: {text[:200]!r}")
        if data.get("resultType") != result_type:
            raise Unavailable(f"Prometheus at {self.url} answered a {str(data.get('resultType'))[:50]} to {expr!r}")
        return data

    def _read(self, url: str, params: dict[str, str]) -> bytes:
        """The answer's body, read within `timeout` seconds in all (httpx's own timeout is per read: a server that
        sends a byte at a time would hold the caller for ever) and up to `MAX_ANSWER_BYTES`."""
        deadline = time.monotonic() + self.timeout
        chunks, size = [], 0
        try:
            with httpx.stream("GET", url, params=params, timeout=self.timeout) as answer:
                for chunk in answer.iter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise Unavailable(f"Prometheus at {self.url} answered more than {MAX_ANSWER_BYTES} bytes")
                    if time.monotonic() > deadline:
                        raise Unavailable(f"Prometheus at {self.url} did not finish its answer in {self.timeout:g}s")
                    chunks.append(chunk)
        except httpx.HTTPError as exc:
            raise Unavailable(f"Prometheus at {self.url} did not answer: {exc}") from exc
        return b"".join(chunks)

    def summed_increase(self, series: str, by: str, since: float | None, at: float) -> dict[tuple, float]:
        """`sum by (by) (increase_between(series))` between `since` and `at`: label values (in the order of `by`) ->
        count."""
        names = [name.strip() for name in by.split(",")]
        expr = f"sum by ({by}) ({increase_between(series, None if since is None else at - since)})"
        return {tuple(labels.get(name, "") for name in names): value for labels, value in self.query(expr, at)}


def labelset(metric: object) -> dict[str, str]:
    """A series' labels as Prometheus sends them: an object of strings (TypeError otherwise)."""
    if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
        raise TypeError(f"labels {str(metric)[:100]}")
    return metric
