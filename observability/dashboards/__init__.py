"""The Grafana dashboards, written as code and saved as provisioned JSON under observability/grafana/dashboards/.

    .venv/bin/python -m observability.dashboards      # rewrite the JSON files after changing a panel here

One module per dashboard, built from the shared pieces in `panels`. A unit test checks that the saved files are what
`render` writes; an integration test runs every query (`queries`) against a real Prometheus that scraped the real
services and the load generator.
"""

from __future__ import annotations

import json
from pathlib import Path

from observability.dashboards.loadtest import loadtest
from observability.dashboards.models import models
from observability.dashboards.serving import serving
from observability.dashboards.triton import triton

OUT = Path(__file__).resolve().parent.parent / "grafana" / "dashboards"
DASHBOARDS = {"loadtest.json": loadtest, "triton.json": triton, "serving.json": serving, "models.json": models}


def render() -> dict[str, str]:
    """Each dashboard's file name and the JSON text saved for it."""
    return {name: json.dumps(build(), indent=2) + "\n" for name, build in DASHBOARDS.items()}


def queries(text: str) -> list[str]:
    """Every PromQL expression of a saved dashboard: its panels' targets, and each template variable's
    `label_values(metric, label)` (Grafana syntax) as the PromQL that answers it, `count by (label) (metric)`."""
    data = json.loads(text)
    panels = [t["expr"] for p in data["panels"] for t in p["targets"]]
    variables = []
    for item in data["templating"]["list"]:
        metric, label = (part.strip() for part in item["query"].removeprefix("label_values(").rstrip(")").split(","))
        variables.append(f"count by ({label}) ({metric})")
    return panels + variables
