"""Every Grafana dashboard query and recording rule is valid PromQL and returns data, on a real Prometheus that
scraped a real FastAPI stack, a real gateway, a real Triton, the real lifecycle controller and the real load
generator. (That the saved dashboards
are what the code writes is a unit test: tests/unit/observability/test_dashboards.py.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from loadtest import engine
from loadtest.metrics import GeneratorMetrics
from loadtest.targets import build_targets
from observability.dashboards import OUT, queries, render
from services.cli import app
from services.gateway.endpoints import EndpointsFile
from services.launcher import Launcher, free_port
from services.monitoring.statistics import EndpointMetrics, Variable
from services.prometheus import CONFIG_DIR, prometheus_process
from services.stacks import StackOptions
from services.stacks.clearml import controller_process
from services.triton.control_key import KEY_FILE
from services.triton.repository import RenderOptions
from tests.support.docblocks import REPO
from tests.support.servers import Server, TritonServer, start_gateway, start_http_stack, start_triton

FAST_DRIFT = {
    "SERVING_MONITORING__REFERENCE_SIZE": "20",
    "SERVING_MONITORING__MIN_SAMPLES": "10",
    "SERVING_MONITORING__INTERVAL": "1",
}
# Grafana's variables as a dashboard with every variable at "All" sends them.
ALL = {
    "$__rate_interval": "30s",
    "$stack": ".*",
    "$workers": ".*",
    "$batching": ".*",
    "$model": ".*",
    "$job": ".*",
    "$endpoint": ".*",
}


def test_prometheus_config_and_rules_pass_promtool():
    for kind, path in (("config", CONFIG_DIR / "prometheus.yml"), ("rules", CONFIG_DIR / "rules.yml")):
        result = subprocess.run(["promtool", "check", kind, str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_pages_serving_observability_and_the_monitoring_page_name_exist(tmp_path):
    """On the Prometheus the Makefile installs (Debian's 2.42), whose pages are under /classic/ (issue 42: the page
    sent users to /targets, /rules and /alerts, 404 there)."""
    port, env = free_port(), {"SERVING_RUN_DIR": str(tmp_path)}
    started = CliRunner().invoke(app, ["observability", "--port", str(port)], env=env)
    try:
        assert started.exit_code == 0, started.output
        printed = re.findall(rf"http://127\.0\.0\.1:{port}(/\S+)", started.output)
        documented = re.findall(r"http://127\.0\.0\.1:9090(/[\w/]+)", (REPO / "docs" / "monitoring.md").read_text())
        assert len(printed) == 3 and {"/classic/targets", "/classic/rules", "/classic/alerts"} <= set(documented)
        for path in printed + documented:
            assert httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10).status_code == 200, path
        assert httpx.get(f"http://127.0.0.1:{port}/targets", timeout=10).status_code == 404, "what the page said"
    finally:
        CliRunner().invoke(app, ["down"], env=env)


def query(url: str, expr: str) -> list:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]


def scrape_config(api: Server, gateway: Server, triton: TritonServer, generator_port: int, controller_port: int) -> str:
    """The project's Prometheus config pointed at this test's servers (both APIs under the `serving` job), scraping
    and evaluating every second so that a few seconds of traffic give rate() several samples."""
    config = (CONFIG_DIR / "prometheus.yml").read_text()
    targets = f'"{api.url.removeprefix("http://")}", "{gateway.url.removeprefix("http://")}"'
    config = config.replace('"127.0.0.1:8080"', targets)
    config = config.replace("127.0.0.1:8002", triton.metrics_url.removeprefix("http://").removesuffix("/metrics"))
    config = config.replace("127.0.0.1:9110", f"127.0.0.1:{generator_port}")
    config = config.replace("127.0.0.1:9108", f"127.0.0.1:{controller_port}")
    return config.replace("scrape_interval: 5s", "scrape_interval: 1s").replace(
        "evaluation_interval: 5s", "evaluation_interval: 1s"
    )


def drive_traffic(api: Server, gateway: Server, triton: TritonServer, metrics: GeneratorMetrics) -> None:
    """Traffic for every scraped target, long enough that rate() has several samples: an open-loop attack on both
    APIs, then a closed loop on Triton's KServe route, each counted by the generator's metrics under its run."""
    texts = ["hello world", "the quick brown fox"]
    targets = build_targets(api.url, "serve", texts) + build_targets(gateway.url, "serve", texts)
    kserve = build_targets(triton.http_url, "kserve", texts)
    labels = {"stack": "fastapi", "workers": "1", "batching": "on", "rate": "40"}
    engine.attack(engine.AttackSpec(targets=targets, rate=40, duration=6), metrics.observer(labels))
    engine.attack(
        engine.AttackSpec(targets=kserve, rate=None, concurrency=8, duration=3),
        metrics.observer({**labels, "stack": "triton", "rate": "0"}),
    )


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, tiny_model: Path, tiny_classifier: Path) -> Iterator[str]:
    """The URL of a Prometheus that scraped, during real traffic: the FastAPI stack serving a classifier, the gateway
    serving the embedding model with declared custom statistics, Triton, the controller `serving up` starts beside
    them (without a Prometheus of its own) and the load generator."""
    tmp_path = tmp_path_factory.mktemp("observability")
    with ExitStack() as running:
        triton = start_triton(tmp_path / "triton", tiny_model, RenderOptions(batching=True))
        running.callback(triton.stop)
        api = start_http_stack(tmp_path / "api", tiny_classifier, env=FAST_DRIFT)
        running.callback(api.launcher.stop_all)
        (tmp_path / "gateway").mkdir()
        declared = EndpointMetrics(variables={"tokens": Variable(kind="scalar", buckets=[2, 4, 8, 16])})
        EndpointsFile(metrics={"minilm": declared}).write(tmp_path / "gateway" / "endpoints.json")
        gateway = start_gateway(tmp_path / "gateway", tiny_model, triton, env=FAST_DRIFT)
        running.callback(gateway.launcher.stop_all)
        controller_port = free_port()
        stack = StackOptions(
            port=int(gateway.url.rsplit(":", 1)[1]),
            run_dir=tmp_path / "controller",
            triton_ports=triton.ports,
            controller_metrics_port=controller_port,
        )
        controller = controller_process(stack, tmp_path / "controller" / "lifecycle")
        controller.env["CONTROLLER_TRITON_CONTROL_KEY_FILE"] = str(tmp_path / "triton" / KEY_FILE)
        controllers = Launcher(stack.run_dir)
        running.callback(controllers.stop_all)
        controllers.start_ready(controller, detach=True, timeout=60)
        metrics = GeneratorMetrics()
        generator_port = free_port()
        metrics.serve(generator_port)
        config_file = tmp_path / "prometheus.yml"
        config_file.write_text(scrape_config(api, gateway, triton, generator_port, controller_port))
        shutil.copy(CONFIG_DIR / "rules.yml", tmp_path / "rules.yml")
        port = free_port()
        launcher = Launcher(tmp_path)
        running.callback(launcher.stop_all)
        launcher.start_ready(prometheus_process(config_file, tmp_path / "data", port), detach=True, timeout=60)
        drive_traffic(api, gateway, triton, metrics)
        time.sleep(3)
        yield f"http://127.0.0.1:{port}"


def test_prometheus_scrapes_every_job(prometheus):
    """The controller's job too: its /metrics is served whenever it runs, not only when it judges a fleet's drift
    (issue 42: on a default `make up` the job was DOWN, connection refused)."""
    deadline = time.monotonic() + 60  # the controller serves once its registry is open: later than the others
    while {r["metric"]["job"] for r in query(prometheus, "up == 1")} != {"serving", "triton", "loadtest", "controller"}:
        assert time.monotonic() < deadline, query(prometheus, "up")
        time.sleep(0.5)
    assert [r["value"][1] for r in query(prometheus, "serving_registry_up")] == ["1"]


def test_every_dashboard_query_returns_data_from_real_scrapes(prometheus):
    for name in render():
        for expr in queries((OUT / name).read_text()):
            concrete = expr
            for variable, value in ALL.items():
                concrete = concrete.replace(variable, value)
            assert query(prometheus, concrete), f"{name}: no data for {concrete}"


def test_every_recording_rule_produces_data(prometheus):
    for record in ("loadtest:latency_seconds:p99", "serving:stage_latency_seconds:p99", "triton:batch_size:avg30s"):
        assert query(prometheus, record), f"recording rule {record} produced nothing"


def test_serving_dashboards_draws_every_panel_from_real_scrapes(prometheus, tmp_path):
    """The dashboards without Grafana (issue 42): every panel of every dashboard drawn with data, from the same
    PromQL as the saved JSON, into images and a page under the run directory."""
    result = CliRunner().invoke(
        app, ["dashboards", "--prometheus", prometheus, "--since", "5m"], env={"SERVING_RUN_DIR": str(tmp_path)}
    )
    assert result.exit_code == 0, result.output
    statuses = [line for line in result.output.splitlines() if ": " in line and not line.startswith("page:")]
    panels = sum(len(json.loads((OUT / name).read_text())["panels"]) for name in render())
    assert len(statuses) == panels and all(": data (" in line for line in statuses), result.output
    index = (tmp_path / "dashboards" / "index.html").read_text()
    assert index.count("<img ") == panels and (tmp_path / "dashboards" / "triton").is_dir()
