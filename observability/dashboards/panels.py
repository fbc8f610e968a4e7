"""What every dashboard is built from: a time-series panel, a template variable, the dashboard that lays its panels
out, and the PromQL shapes the panels repeat (a rate over Grafana's interval, a sum of rates, a histogram quantile).

Written once so that the four dashboards differ only in their queries: same data source, same grid, same refresh.
"""

from __future__ import annotations

DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
# Two panels a row on Grafana's 24-column grid, in the order a dashboard lists them.
WIDTH, HEIGHT = 12, 8


def rate(metric: str, selector: str) -> str:
    """`rate(metric{selector}[$__rate_interval])`: Grafana picks the interval from the scrape interval and zoom."""
    return f"rate({metric}{{{selector}}}[$__rate_interval])"


def summed(by: str, metric: str, selector: str) -> str:
    """The rate of `metric` summed over every label but `by` (over workers and replicas, that is)."""
    return f"sum by ({by}) ({rate(metric, selector)})"


def quantile(q: str, by: str, histogram: str, selector: str) -> str:
    """The `q` quantile of a cumulative Prometheus histogram per `by`, from its `_bucket` series summed by `le`."""
    return f"histogram_quantile({q}, {summed(f'le, {by}', histogram + '_bucket', selector)})"


def panel(title: str, targets: list[tuple[str, str]], unit: str) -> dict:
    """A time-series panel with one query per (PromQL, legend) pair; `dashboard` gives it its place and id."""
    return {
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": 0, "y": 0, "w": WIDTH, "h": HEIGHT},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(65 + i), "expr": expr, "legendFormat": legend, "datasource": DATASOURCE}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def variable(name: str, query: str) -> dict:
    """A multi-value template variable filled by `label_values(...)`, "All" (any value) by default."""
    return {
        "name": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
    }


def dashboard(uid: str, title: str, panels: list[dict], variables: list[dict] | None = None) -> dict:
    """The provisioned dashboard: panels numbered from 1 and laid out two a row in the order given."""
    per_row = 24 // WIDTH
    for index, item in enumerate(panels):
        item["gridPos"].update(x=WIDTH * (index % per_row), y=HEIGHT * (index // per_row))
        item["id"] = index + 1
    return {
        "uid": uid,
        "title": title,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "tags": ["transformer-serving"],
        "templating": {"list": variables or []},
        "panels": panels,
    }
