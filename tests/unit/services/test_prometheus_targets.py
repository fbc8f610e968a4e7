"""`serving observability` scrapes the stack of its own run directory, and `serving dashboards` names the scrape
targets that are down when a panel is empty."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
import yaml

from services.dashboards.images import draw_dashboard
from services.dashboards.queries import Dashboard, dashboard_queries
from services.prometheus import CONFIG_DIR, default_targets, render_config, stack_targets
from services.prometheus_api import PrometheusApi
from tests.support.http_stub import send_json, serve

CLEARML_URLS = {
    "api": "http://127.0.0.1:18080",
    "metrics": "http://127.0.0.1:18080/metrics",
    "triton_metrics": "http://127.0.0.1:18102/metrics",
    "triton_grpc": "127.0.0.1:18101",
    "controller_metrics": "http://127.0.0.1:19108/metrics",
}


@pytest.fixture
def running(tmp_path) -> Iterator[subprocess.Popen]:
    """A process recorded in `tmp_path` as the stack's supervisor, alive while the test runs."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (tmp_path / "supervisor.pid").write_text(str(proc.pid))
    yield proc
    proc.kill()
    proc.wait()


def test_without_a_running_stack_there_are_no_stack_targets_and_the_defaults_are_make_ups(tmp_path):
    assert stack_targets(tmp_path) is None
    (tmp_path / "stack.json").write_text(json.dumps({"urls": CLEARML_URLS}))
    assert stack_targets(tmp_path) is None, "a stack.json left by a stack that no longer runs is not followed"
    assert default_targets() == {
        "serving": ["127.0.0.1:8080"],
        "triton": ["127.0.0.1:8002"],
        "loadtest": ["127.0.0.1:9110"],
        "controller": ["127.0.0.1:9108"],
    }


def test_a_running_stacks_own_ports_are_scraped(tmp_path, running):
    (tmp_path / "stack.json").write_text(json.dumps({"urls": CLEARML_URLS}))
    assert stack_targets(tmp_path) == {
        "serving": ["127.0.0.1:18080"],
        "triton": ["127.0.0.1:18102"],
        "loadtest": ["127.0.0.1:9110"],
        "controller": ["127.0.0.1:19108"],
    }


def test_a_part_the_running_stack_has_not_is_not_scraped(tmp_path, running):
    triton = {"api": "http://127.0.0.1:18000", "triton_metrics": "http://127.0.0.1:18002/metrics"}
    (tmp_path / "stack.json").write_text(json.dumps({"urls": triton}))
    targets = stack_targets(tmp_path)
    assert targets is not None
    assert targets["serving"] == [] and targets["controller"] == [], "Triton's HTTP port has no /metrics"
    assert targets["triton"] == ["127.0.0.1:18002"]


def test_the_rendered_configuration_keeps_the_projects_and_moves_only_the_targets(tmp_path):
    targets = default_targets() | {"serving": ["127.0.0.1:18080"], "triton": []}
    rendered = yaml.safe_load(render_config(targets))
    project = yaml.safe_load((CONFIG_DIR / "prometheus.yml").read_text())
    assert rendered["global"] == project["global"]
    assert rendered["rule_files"] == [str(CONFIG_DIR / "rules.yml")], "absolute: the file is read from the run dir"
    jobs = {job["job_name"]: job["static_configs"] for job in rendered["scrape_configs"]}
    assert jobs["serving"] == [{"targets": ["127.0.0.1:18080"]}]
    assert jobs["triton"] == [{"targets": []}]
    assert jobs["controller"] == [{"targets": ["127.0.0.1:9108"]}]


class Targets(BaseHTTPRequestHandler):
    """A Prometheus whose controller target is down and whose queries find nothing."""

    def do_GET(self):
        if self.path.startswith("/api/v1/query_range"):
            return send_json(self, 200, {"status": "success", "data": {"resultType": "matrix", "result": []}})
        if self.path.startswith("/api/v1/query"):
            return send_json(self, 200, {"status": "success", "data": {"resultType": "vector", "result": []}})
        assert self.path.startswith("/api/v1/targets")
        active = [
            {"labels": {"job": "serving"}, "scrapeUrl": "http://127.0.0.1:18080/metrics", "health": "up"},
            {
                "labels": {"job": "controller"},
                "scrapeUrl": "http://127.0.0.1:9108/metrics",
                "health": "down",
                "lastError": "connection refused",
            },
        ]
        send_json(self, 200, {"status": "success", "data": {"activeTargets": active, "droppedTargets": []}})

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    yield from serve(Targets)


def test_down_targets_name_the_job_the_address_and_why(prometheus):
    assert PrometheusApi(prometheus).down_targets() == [("controller 127.0.0.1:9108", "connection refused")]


def test_a_panel_without_data_names_the_down_targets_of_the_jobs_that_feed_it(tmp_path):
    from observability.dashboards import OUT as SAVED

    triton = Dashboard.load(SAVED / "triton.json")
    down = ["triton 127.0.0.1:8002", "serving 127.0.0.1:18080"]
    drawn = draw_dashboard(triton, dashboard_queries(triton, {}, step_s=4), lambda expr: [], tmp_path, down)
    assert {d.status for d in drawn} == {"no data; scrape targets down: triton 127.0.0.1:8002"}, "serving feeds none"


def test_the_dashboards_command_says_which_targets_are_down(prometheus, tmp_path):
    from typer.testing import CliRunner

    from services.cli import app

    env = {"SERVING_RUN_DIR": str(tmp_path)}
    result = CliRunner().invoke(
        app, ["dashboards", "--prometheus", prometheus, "--dashboard", "triton", "--dashboard", "models"], env=env
    )
    assert result.exit_code == 0, result.output
    assert "scrape target down: controller 127.0.0.1:9108: connection refused" in result.output
    assert "triton: Average batch size: no data\n" in result.output, "the controller feeds no Triton panel"
    assert (
        "models: Drift scores (PSI alert threshold 0.25): no data; scrape targets down: controller 127.0.0.1:9108"
        in (result.output)
    )
    page = (tmp_path / "dashboards" / "index.html").read_text()
    assert "no data; scrape targets down: controller 127.0.0.1:9108" in page
