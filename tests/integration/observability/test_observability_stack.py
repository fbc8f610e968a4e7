"""Every Grafana dashboard query and recording rule is valid PromQL and returns data, on a real Prometheus that
scraped a real FastAPI stack, a real Triton and the real load generator."""

from __future__ import annotations

import shutil
import subprocess
import time

import httpx

from loadtest import engine
from loadtest.metrics import GeneratorMetrics
from loadtest.targets import build_targets
from observability.dashboards import OUT, queries, render
from services.gateway.endpoints import EndpointsFile
from services.launcher import Launcher, free_port
from services.monitoring.statistics import EndpointMetrics, Variable
from services.prometheus import CONFIG_DIR, prometheus_process
from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_http_stack, start_triton


def test_saved_dashboards_are_what_the_code_writes():
    for name, text in render().items():
        assert (OUT / name).read_text() == text, f"{name} is stale: run .venv/bin/python -m observability.dashboards"


def test_prometheus_config_and_rules_pass_promtool():
    for kind, path in (("config", CONFIG_DIR / "prometheus.yml"), ("rules", CONFIG_DIR / "rules.yml")):
        result = subprocess.run(["promtool", "check", kind, str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def query(url: str, expr: str) -> list:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]


FAST_DRIFT = {
    "SERVING_MONITORING__REFERENCE_SIZE": "20",
    "SERVING_MONITORING__MIN_SAMPLES": "10",
    "SERVING_MONITORING__INTERVAL": "1",
    "GATEWAY_MONITORING__REFERENCE_SIZE": "20",
    "GATEWAY_MONITORING__MIN_SAMPLES": "10",
    "GATEWAY_MONITORING__INTERVAL": "1",
}


def test_every_dashboard_query_returns_data_from_real_scrapes(tmp_path, tiny_model, tiny_classifier):
    """Two API targets under the `serving` job: the FastAPI stack serving a classifier, the gateway serving the
    embedding model with declared custom statistics; Triton; the load generator."""
    triton = start_triton(tmp_path / "triton", tiny_model, RenderOptions(batching=True))
    api = start_http_stack(tmp_path / "api", tiny_classifier, env=FAST_DRIFT)
    (tmp_path / "gateway").mkdir()
    declared = EndpointMetrics(variables={"tokens": Variable(kind="scalar", buckets=[2, 4, 8, 16])})
    EndpointsFile(metrics={"minilm": declared}).write(tmp_path / "gateway" / "endpoints.json")
    gateway = start_gateway(tmp_path / "gateway", tiny_model, triton, env=FAST_DRIFT)
    metrics = GeneratorMetrics()
    generator_port = free_port()
    metrics.serve(generator_port)
    config = (CONFIG_DIR / "prometheus.yml").read_text()
    targets = f'"{api.url.removeprefix("http://")}", "{gateway.url.removeprefix("http://")}"'
    config = config.replace('"127.0.0.1:8080"', targets)
    config = config.replace("127.0.0.1:8002", triton.metrics_url.removeprefix("http://").removesuffix("/metrics"))
    config = config.replace("127.0.0.1:9110", f"127.0.0.1:{generator_port}")
    config = config.replace("scrape_interval: 5s", "scrape_interval: 1s").replace(
        "evaluation_interval: 5s", "evaluation_interval: 1s"
    )
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(config)
    shutil.copy(CONFIG_DIR / "rules.yml", tmp_path / "rules.yml")
    port = free_port()
    launcher = Launcher(tmp_path)
    try:
        launcher.start_ready(prometheus_process(config_file, tmp_path / "data", port), detach=True, timeout=60)
        url = f"http://127.0.0.1:{port}"
        # traffic for every scraped target, for long enough that rate() has several samples
        texts = ["hello world", "the quick brown fox"]
        targets = build_targets(api.url, "serve", texts) + build_targets(gateway.url, "serve", texts)
        kserve = build_targets(triton.http_url, "kserve", texts)
        labels = {"stack": "fastapi", "workers": "1", "batching": "on", "rate": "40"}
        engine.attack(engine.AttackSpec(targets=targets, rate=40, duration=6), metrics.observer(labels))
        engine.attack(
            engine.AttackSpec(targets=kserve, rate=None, concurrency=8, duration=3),
            metrics.observer({**labels, "stack": "triton", "rate": "0"}),
        )
        time.sleep(3)
        up = query(url, "up")
        assert {r["metric"]["job"] for r in up if r["value"][1] == "1"} == {"serving", "triton", "loadtest"}
        variables = {
            "$__rate_interval": "30s",
            "$stack": ".*",
            "$workers": ".*",
            "$batching": ".*",
            "$model": ".*",
            "$job": ".*",
            "$endpoint": ".*",
        }
        for name in render():
            for expr in queries((OUT / name).read_text()):
                concrete = expr
                for variable, value in variables.items():
                    concrete = concrete.replace(variable, value)
                assert query(url, concrete), f"{name}: no data for {concrete}"
        for record in ("loadtest:latency_seconds:p99", "serving:stage_latency_seconds:p99", "triton:batch_size:avg30s"):
            assert query(url, record), f"recording rule {record} produced nothing"
    finally:
        launcher.stop_all()
        gateway.launcher.stop_all()
        triton.stop()
        api.launcher.stop_all()
