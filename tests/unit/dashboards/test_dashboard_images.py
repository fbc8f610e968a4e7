"""`serving dashboards` without a Prometheus: the saved dashboards' PromQL with its variables given values as Grafana
gives them, and panels drawn from canned range results (data, no data, a refused query) into images and a page."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from observability.dashboards import OUT as SAVED
from services.cli import app
from services.common.errors import InvalidInput, Unavailable
from services.dashboards.images import draw_dashboard, draw_panel, page, shown
from services.dashboards.queries import (
    Dashboard,
    Panel,
    Target,
    chosen,
    dashboard_queries,
    legend,
    rate_interval,
    substitute,
)

PNG = b"\x89PNG"


def saved(name: str) -> Dashboard:
    return Dashboard.load(SAVED / f"{name}.json")


def test_every_variable_is_replaced_and_nothing_else():
    models = saved("models")
    (custom,) = [p for p in models.panels if p.title.startswith("Declared custom statistics")]
    [[expr]] = dashboard_queries(Dashboard("m", "m", models.variables, [custom]), {}, step_s=4)
    assert '"${1}"' in expr, "label_replace's ${1} is PromQL's, not a variable"
    assert "[20s:]" in expr and "$__rate_interval" not in expr
    for dashboard in (saved(name) for name in ("serving", "triton", "models", "loadtest")):
        for exprs in dashboard_queries(dashboard, {}, step_s=4):
            for expr in exprs:
                assert "$" not in expr.replace("${1}", ""), expr


def test_a_given_value_is_matched_literally_and_the_others_stay_at_all():
    triton = saved("triton")
    values = chosen([triton], ["model=encoder", "model=a.b"])
    first = dashboard_queries(triton, values, step_s=4)[0][0]
    assert 'model=~"(encoder|a\\\\.b)"' in first, first
    everything = dashboard_queries(triton, {}, step_s=4)[0][0]
    assert 'model=~".*"' in everything
    assert substitute('x{job=~"$job"}[$__rate_interval]', {"job": "serving"}, 30) == 'x{job=~"serving"}[35s]'
    assert rate_interval(1) == "20s" and rate_interval(60) == "65s", "Grafana's: max(4 scrapes, step + 1 scrape)"


def test_an_unknown_variable_names_the_ones_there_are():
    with pytest.raises(InvalidInput, match="no dashboard has a variable 'modle'; they have .*model"):
        chosen([saved("triton"), saved("serving")], ["modle=encoder"])
    with pytest.raises(InvalidInput, match="NAME=VALUE"):
        chosen([saved("triton")], ["model"])


def test_legends_follow_grafanas_format():
    assert legend("{{model}} p99", {"model": "encoder"}) == "encoder p99"
    assert legend("", {"__name__": "up", "job": "x"}) == "job=x"


def test_panels_with_data_without_data_and_with_a_refused_query_are_all_drawn(tmp_path):
    triton = saved("triton")
    queries = dashboard_queries(triton, {}, step_s=4)
    batch, queue, compute, requests = (exprs[0] for exprs in queries)
    now = 1_800_000_000.0
    canned = {
        batch: [({"model": "encoder"}, [(now + i, 4.0 + i) for i in range(10)])],
        queue: [({"model": "encoder"}, [(now, float("nan"))])],  # a quantile of nothing: NaN only
    }

    def fetch(expr: str):
        if expr == compute:
            raise Unavailable("Prometheus at http://x refused it: parse error")
        return canned.get(expr, [])

    drawn = draw_dashboard(triton, queries, fetch, tmp_path)
    statuses = {d.title: d.status for d in drawn}
    assert statuses == {
        "Average batch size": "data (1 series)",
        "Queue time per request": "no data",
        "Compute time per batch": "query failed: Prometheus at http://x refused it: parse error",
        "Requests: success and failure": "no data",
    }, statuses
    assert requests in drawn[3].queries
    for item in drawn:
        assert item.image.read_bytes().startswith(PNG) and item.image.parent == tmp_path / "triton"
    index = page([triton], drawn, tmp_path, "canned").read_text()
    assert index.count("<img src='triton/") == 4 and "no data" in index and "parse error" in index
    assert "sum by (model) (rate(nv_inference_count{model=~&quot;.*&quot;}[20s]))" in index, "the queries shown"


def test_the_command_says_how_to_start_prometheus_when_none_answers(tmp_path):
    from services.launcher import free_port

    env = {"SERVING_RUN_DIR": str(tmp_path)}
    result = CliRunner().invoke(app, ["dashboards", "--prometheus", f"http://127.0.0.1:{free_port()}"], env=env)
    assert result.exit_code == 2 and "make observability" in result.output, result.output
    result = CliRunner().invoke(app, ["dashboards", "--dashboard", "grafana"], env=env)
    assert result.exit_code == 2 and "there are loadtest, models, serving, triton" in result.output, result.output
    result = CliRunner().invoke(app, ["dashboards", "--var", "modle=encoder"], env=env)
    assert result.exit_code == 2 and "no dashboard has a variable 'modle'" in result.output, result.output
    assert "make observability" not in result.output, "a wrong option is not a missing Prometheus"
    assert json.loads((SAVED / "triton.json").read_text())["templating"]["list"][0]["name"] == "model"


def test_label_values_and_errors_from_prometheus_are_drawn_as_text_not_mathtext(tmp_path):
    """Prometheus's label values and error messages are untrusted: `$x^$` read as matplotlib mathtext fails to draw
    (ValueError from savefig), which stopped every other panel and the page."""
    panel = Panel("$\\frac{$ latency", "s", [Target("a", "{{pod}}"), Target("b", "")])
    labels = [{"pod": "$x^$"}, {"pod": "$\\frac{$"}, {"pod": "_hidden"}]

    def fetch(expr: str):
        if expr == "b":
            raise Unavailable("Prometheus at http://x refused 'b': parse error at $\\frac{$")
        return [(item, [(1.0, 1.0), (2.0, 2.0)]) for item in labels]

    drawn = draw_panel(panel, ["a", "b"], fetch, tmp_path / "p.png", "d")
    assert drawn.status == "data (3 series)" and drawn.image.read_bytes().startswith(PNG)
    assert shown("_hidden") != "_hidden", "matplotlib leaves a label starting with _ out of the legend"
    failed = draw_panel(Panel("t", "s", [Target("b", "")]), ["b"], fetch, tmp_path / "q.png", "d")
    assert failed.status.startswith("query failed") and failed.image.read_bytes().startswith(PNG)


def test_an_empty_panel_is_blamed_only_on_the_down_targets_of_the_jobs_that_feed_its_dashboard():
    from services.dashboards.images import feeding

    down = ["loadtest 127.0.0.1:9110", "controller 127.0.0.1:9108", "triton 127.0.0.1:8002"]
    assert feeding("models", down) == ["controller 127.0.0.1:9108"]
    assert feeding("loadtest", down) == ["loadtest 127.0.0.1:9110"]
    assert feeding("serving", down) == []
    assert feeding("someone-elses", down) == down, "a dashboard the project does not ship: every down target"
