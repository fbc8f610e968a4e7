"""The dashboards as code: the saved JSON is what the code writes, the shared panel pieces lay out and query as the
dashboards expect. That every query returns data from real scrapes is tests/integration/observability's job."""

from __future__ import annotations

import json
import re
from pathlib import Path

from observability.dashboards import OUT, queries, render
from observability.dashboards.panels import dashboard, panel, quantile, summed


def test_saved_dashboards_are_what_the_code_writes():
    for name, text in render().items():
        assert (OUT / name).read_text() == text, f"{name} is stale: run .venv/bin/python -m observability.dashboards"


def test_panels_are_numbered_and_laid_out_two_a_row_in_the_order_given():
    panels = [panel(f"p{i}", [("up", "{{job}}")], "none") for i in range(3)]
    built = dashboard("uid", "Title", panels)
    assert [(p["id"], p["gridPos"]) for p in built["panels"]] == [
        (1, {"x": 0, "y": 0, "w": 12, "h": 8}),
        (2, {"x": 12, "y": 0, "w": 12, "h": 8}),
        (3, {"x": 0, "y": 8, "w": 12, "h": 8}),
    ]
    assert built["templating"] == {"list": []}


def test_each_target_of_a_panel_gets_the_next_ref_id():
    targets = panel("t", [("a", "A"), ("b", "B")], "s")["targets"]
    assert [(t["refId"], t["expr"], t["legendFormat"]) for t in targets] == [("A", "a", "A"), ("B", "b", "B")]


def test_a_quantile_sums_the_buckets_by_le_and_the_labels_kept():
    assert summed("route", "m_total", 'job=~"$job"') == 'sum by (route) (rate(m_total{job=~"$job"}[$__rate_interval]))'
    assert quantile("0.99", "stage", "m_seconds", 'job=~"$job"') == (
        'histogram_quantile(0.99, sum by (le, stage) (rate(m_seconds_bucket{job=~"$job"}[$__rate_interval])))'
    )


def test_queries_answer_each_template_variable_with_the_promql_grafana_would_run():
    found = queries(render()["triton.json"])
    assert found[-1] == "count by (model) (nv_inference_count)"
    assert len(found) == 1 + sum(len(p["targets"]) for p in json.loads(render()["triton.json"])["panels"])


def test_every_variable_a_query_uses_is_defined_on_its_dashboard():
    for name, text in render().items():
        data = json.loads(text)
        defined = {item["name"] for item in data["templating"]["list"]}
        used = {v for t in (t for p in data["panels"] for t in p["targets"]) for v in re.findall(r"\$(\w+)", t["expr"])}
        assert used - {"__rate_interval"} <= defined, name


def test_the_monitoring_page_says_what_to_put_for_every_variable():
    """Its recipe for pasting a panel's query into Prometheus' own UI (issue 42: `$model` was left out)."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "monitoring.md").read_text()
    for name, text in render().items():
        for variable in json.loads(text)["templating"]["list"]:
            assert f"`${variable['name']}`" in page, f"{name}: ${variable['name']}"
    assert "`$__rate_interval` by `1m`" in page
