"""`serving dashboards`: the Grafana dashboards' panels drawn from a running Prometheus into PNG images and one HTML
page, under the run directory, for a machine without Grafana (`services.dashboards`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.common.cli import console, fail
from services.common.settings import RunSettings

if TYPE_CHECKING:
    from services.dashboards.images import Series

POINTS = 240
"""Points per line: the step is the time range divided by this, at least a second."""


def dashboards(
    prometheus: str = typer.Option("http://127.0.0.1:9090", help="The Prometheus to ask (`make observability`'s)."),
    since: str = typer.Option("15m", help="The time range drawn, up to now: 30s, 15m, 2h."),
    var: list[str] = typer.Option(
        [],
        "--var",
        help="A dashboard variable's value, NAME=VALUE (model=encoder, endpoint=minilm, job=serving, stack=clearml); "
        "repeat a name for several; a variable not given is at All.",
    ),
    dashboard: list[str] = typer.Option([], help="Only these dashboards (serving, triton, models, loadtest)."),
    out: Path | None = typer.Option(None, help="Where the images and index.html go; default: <run dir>/dashboards."),
) -> None:
    """Draw each Grafana dashboard's panels (observability/grafana/dashboards/*.json, the same PromQL) from Prometheus
    into PNG images and one page, index.html."""
    from observability.dashboards import OUT as SAVED
    from observability.logreader import parse_since
    from services.common.errors import ServingError
    from services.dashboards.images import draw_dashboard, page
    from services.dashboards.queries import Dashboard, chosen, dashboard_queries
    from services.prometheus_api import PrometheusApi

    found = [Dashboard.load(path) for path in sorted(SAVED.glob("*.json"))]
    names = [d.name for d in found]
    if unknown := [name for name in dashboard if name not in names]:
        fail(ValueError(f"--dashboard: no dashboard {', '.join(unknown)}; there are {', '.join(names)}"))
    selected = [d for d in found if not dashboard or d.name in dashboard]
    out = out or RunSettings().run_dir / "dashboards"
    try:
        seconds = parse_since(since)
        values = chosen(selected, var)
        api = PrometheusApi(prometheus)
    except (ValueError, ServingError) as error:
        fail(error)
    end = time.time()
    try:
        api.query("vector(1)", end)
    except ServingError as error:
        fail(f"{error.message}; start one with `make observability`, or name it with --prometheus")
    start, step = end - seconds, max(1.0, round(seconds / POINTS))
    try:
        down = api.down_targets()
    except ServingError as error:
        console.print(f"could not list the scrape targets: {error.message}", markup=False)
        down = []
    for target, why in down:
        console.print(f"scrape target down: {target}: {why}", markup=False)

    def fetch(expr: str) -> list[Series]:
        return api.query_range(expr, start, end, step)

    drawn = []
    for item in selected:
        for panel in draw_dashboard(item, dashboard_queries(item, values, step), fetch, out, [t for t, _ in down]):
            drawn.append(panel)
            console.print(f"{item.name}: {panel.title}: {panel.status}", markup=False)
    given = ", ".join(f"{name}={'|'.join(v)}" for name, v in values.items()) or "every variable at All"
    heading = f"From {prometheus}, the last {since} up to {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(end))}"
    path = page(selected, drawn, out, f"{heading}; {given}; a point every {step:g} s.")
    console.print(f"page: {path}", markup=False)
