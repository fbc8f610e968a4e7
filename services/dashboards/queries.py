"""A saved Grafana dashboard's panels as concrete PromQL: its template variables (`$model`, `$endpoint`, ...) and
Grafana's own (`$__rate_interval`, `$__interval`) replaced as Grafana would replace them, and nothing else touched
(`${1}` in a `label_replace` is PromQL's, not a variable)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from services.common.errors import InvalidInput

SCRAPE_INTERVAL_S = 5.0
"""observability/prometheus/prometheus.yml's scrape interval, what Grafana's `$__rate_interval` is built from."""
ALL = ".*"
"""A variable at "All": its `allValue`, which every dashboard here uses as `label=~"$name"`."""
REGEX_SPECIAL = re.compile(r"[\\.^$|?*+()\[\]{}]")


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str
    """Grafana's legendFormat: `{{label}}` replaced by each series' label."""


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: list[Target]


@dataclass(frozen=True)
class Dashboard:
    name: str
    """The file's stem: `triton` for triton.json."""
    title: str
    variables: list[str]
    panels: list[Panel] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Dashboard:
        data = json.loads(path.read_text())
        panels = [
            Panel(
                item.get("title", ""),
                item.get("fieldConfig", {}).get("defaults", {}).get("unit", "none"),
                [Target(t["expr"], t.get("legendFormat", "")) for t in item.get("targets", []) if t.get("expr")],
            )
            for item in data.get("panels", [])
        ]
        variables = [item["name"] for item in data.get("templating", {}).get("list", [])]
        return cls(path.stem, data.get("title", path.stem), variables, panels)


def rate_interval(step_s: float, scrape_s: float = SCRAPE_INTERVAL_S) -> str:
    """Grafana's `$__rate_interval`: the larger of four scrape intervals and one step plus a scrape interval."""
    return f"{max(4 * scrape_s, step_s + scrape_s):g}s"


def regex_value(values: list[str]) -> str:
    """Values of a variable as the regex Grafana puts in `label=~"..."`: each matched literally, alternatives
    joined by `|`, escaped for the PromQL string it lands in."""
    if not values:
        return ALL
    escaped = [REGEX_SPECIAL.sub(lambda m: "\\" + m.group(0), v) for v in values]
    joined = escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
    return joined.replace("\\", "\\\\").replace('"', '\\"')


def chosen(dashboards: list[Dashboard], given: list[str]) -> dict[str, list[str]]:
    """`--var NAME=VALUE` options as values per variable (repeat a name for several); InvalidInput naming the
    dashboards' variables when a name is none of them."""
    known = sorted({name for d in dashboards for name in d.variables})
    values: dict[str, list[str]] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidInput(f"--var takes NAME=VALUE (such as model=encoder), not '{item}'", param="var")
        if name not in known:
            have = ", ".join(known)
            raise InvalidInput(f"--var: no dashboard has a variable '{name}'; they have {have}", param="var")
        values.setdefault(name, []).append(value)
    return values


def substitute(expr: str, variables: dict[str, str], step_s: float) -> str:
    """`expr` with `$name` / `${name}` of each of `variables` (name -> value as it goes into the query) and
    Grafana's interval variables replaced; any other `$` left as it is."""
    values = {"__rate_interval": rate_interval(step_s), "__interval": f"{step_s:g}s", **variables}
    names = "|".join(re.escape(name) for name in sorted(values, key=len, reverse=True))
    pattern = re.compile(rf"\$(?:\{{({names})\}}|({names})\b)")
    return pattern.sub(lambda m: values[m.group(1) or m.group(2)], expr)


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legendFormat for one series: `{{label}}` by its value; no template: the series' labels."""
    if not template:
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def dashboard_queries(dashboard: Dashboard, values: dict[str, list[str]], step_s: float) -> list[list[str]]:
    """Each panel's targets as concrete PromQL, variables not given at "All"."""
    variables = {name: regex_value(values.get(name, [])) for name in dashboard.variables}
    return [[substitute(t.expr, variables, step_s) for t in panel.targets] for panel in dashboard.panels]
