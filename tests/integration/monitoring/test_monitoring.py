"""Model monitoring with real parts: a real gateway and Triton, a real FastAPI stack, a real Prometheus evaluating the
project's alert rule, `serving logs` run as a user runs it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from loadtest import engine
from loadtest.sentences import long, short
from loadtest.targets import Target, build_targets
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.launcher import Launcher, free_port
from services.monitoring.statistics import EndpointMetrics, Variable
from services.prometheus import CONFIG_DIR, prometheus_process
from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_http_stack, start_triton

REPORTING_PREPROCESS = """
class Preprocess:
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        collect_custom_statistics_fn({"lang": body.get("lang"), "size": len(body["x"]), "not_declared": 1})
        if body.get("fail"):
            return 1 / 0
        return body["x"]

    def process(self, data, state, collect_custom_statistics_fn=None):
        return [v * 2 for v in data]

    def postprocess(self, data, state, collect_custom_statistics_fn=None):
        return {"y": data, "score": sum(data) / 10}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_model):
    base = tmp_path_factory.mktemp("monitoring")
    triton = start_triton(base / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",))
    run_dir = base / "gateway"
    run_dir.mkdir()
    (base / "reporting.py").write_text(REPORTING_PREPROCESS)
    declared = EndpointMetrics(
        variables={
            "size": Variable(kind="scalar", buckets=[1, 2, 5]),
            "lang": Variable(kind="enum", values=["en", "de"]),
            "score": Variable(kind="value"),
            "tier": Variable(kind="counter"),
        }
    )
    EndpointsFile(
        endpoints={"stats": EndpointConfig(engine="custom", preprocess=str(base / "reporting.py"))},
        metrics={"stats": declared},
    ).write(run_dir / "endpoints.json")
    server = start_gateway(run_dir, tiny_model, triton, env={"SERVING_OBSERVABILITY__LOG_JSON": "true"})
    yield server
    server.launcher.stop_all()
    triton.stop()


def series(text: str) -> set[str]:
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_declared_variables_appear_with_their_buckets_and_values(gateway):
    with gateway.client() as client:
        for body in ({"x": [1], "lang": "en", "tier": 2}, {"x": [1, 2, 3], "lang": "xx"}, {"x": [5], "lang": "de"}):
            assert client.post("/serve/stats", json=body).status_code == 200
        text = client.get("/metrics").text
    assert re.search(r'serving_custom_stats_size_bucket\{le="2\.0",version="1"\} 2\.0', text)  # sizes 1, 3, 1
    assert re.search(r'serving_custom_stats_size_bucket\{le="5\.0",version="1"\} 3\.0', text)
    assert 'serving_custom_stats_lang_total{value="other",version="1"} 1.0' in text, "undeclared value -> other"
    assert 'serving_custom_stats_lang_total{value="en",version="1"} 1.0' in text
    assert 'serving_custom_stats_score{version="1"} 1.0' in text, "the last value (5 * 2 / 10) from the response"
    assert 'serving_custom_stats_score_observed_count{version="1"} 3.0' in text
    assert 'serving_custom_stats_tier_total{version="1"} 2.0' in text, "from the request body"
    assert 'serving_custom_undeclared_total{endpoint="stats"} 3.0' in text
    assert "xx" not in text


def test_ten_thousand_unknown_endpoint_names_create_no_series(gateway):
    with gateway.client() as client:
        client.post("/serve/warm-up-unknown", json={"text": "x"})
        before = series(client.get("/metrics").text)
        targets = [
            Target(
                "POST",
                f"{gateway.url}/serve/{uuid.uuid4().hex}",
                b'{"text": "x"}',
                {"content-type": "application/json"},
            )
            for _ in range(10_000)
        ]
        results = []
        engine.attack(
            engine.AttackSpec(targets=targets, rate=None, concurrency=32, requests=10_000, duration=None),
            results.append,
        )
        after = series(client.get("/metrics").text)
    assert len(results) == 10_000 and {r.code for r in results} == {404}
    assert after == before, sorted(after - before)[:5]


def test_a_preprocess_failure_is_logged_with_its_traceback_under_the_callers_request_id(gateway):
    with gateway.client() as client:
        response = client.post("/serve/stats", json={"x": [1], "fail": True})
    assert response.status_code == 422
    request_id = response.json()["error"]["request_id"]
    assert request_id == response.headers["x-request-id"]
    serving = str(Path(sys.executable).parent / "serving")
    env = {**os.environ, "SERVING_RUN_DIR": str(gateway.launcher.run_dir)}
    deadline = time.monotonic() + 10
    while True:
        shown = subprocess.run(
            [serving, "logs", "--request-id", request_id], capture_output=True, text=True, env=env, timeout=60
        )
        if "Traceback" in shown.stdout or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert shown.returncode == 0, shown.stderr
    assert "preprocess of endpoint 'stats' failed" in shown.stdout and "ZeroDivisionError" in shown.stdout
    assert all(request_id in line for line in shown.stdout.splitlines() if line[:4].isdigit())
    log = gateway.launcher.log_path("api").read_text()
    assert '"logger":"gunicorn.error"' in log, "the gateway's own log lines are in this file"
    assert '"logger":"uvicorn.access"' not in log, "no access log line per request unless --access-logfile asks"


def query(url: str, expr: str) -> list:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_shifted_traffic_raises_the_drift_score_and_the_alert_fires(tmp_path, tiny_model):
    drift = {
        "SERVING_MONITORING__REFERENCE_SIZE": "200",
        "SERVING_MONITORING__WINDOW_SIZE": "200",
        "SERVING_MONITORING__MIN_SAMPLES": "100",
        "SERVING_MONITORING__INTERVAL": "0.5",
    }
    api = start_http_stack(tmp_path / "api", tiny_model, env=drift)
    config = (CONFIG_DIR / "prometheus.yml").read_text().replace('"127.0.0.1:8080"', f'"{api.url[7:]}"')
    config = config.replace("scrape_interval: 5s", "scrape_interval: 1s").replace(
        "evaluation_interval: 5s", "evaluation_interval: 1s"
    )
    (tmp_path / "prometheus.yml").write_text(config)
    rules = (CONFIG_DIR / "rules.yml").read_text()
    assert "for: 5m" in rules
    (tmp_path / "rules.yml").write_text(rules.replace("for: 5m", "for: 2s"))  # the same rule, a shorter wait
    launcher = Launcher(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    psi = 'max(serving_drift_score{feature="token_length",method="psi"})'

    def attack(texts: list[str]) -> None:
        spec = engine.AttackSpec(
            targets=build_targets(api.url, "serve", texts), rate=100, duration=None, requests=len(texts)
        )
        engine.attack(spec, lambda result: None)

    try:
        launcher.start_ready(
            prometheus_process(tmp_path / "prometheus.yml", tmp_path / "data", port), detach=True, timeout=60
        )
        attack(short(200, seed=0))  # the reference: this version's first 200 texts
        attack(short(200, seed=1))  # live traffic like it
        time.sleep(3)
        calm = float(query(url, psi)[0]["value"][1])
        assert calm < 0.25, calm
        assert not query(url, 'ALERTS{alertname="ModelInputDrift"}')
        attack(long(200, seed=2))  # only long texts now
        deadline = time.monotonic() + 30
        while not query(url, 'ALERTS{alertname="ModelInputDrift",alertstate="firing"}'):
            assert time.monotonic() < deadline, query(url, psi)
            time.sleep(1)
        shifted = float(query(url, psi)[0]["value"][1])
        assert shifted > 0.25, shifted
        ks = float(query(url, 'max(serving_drift_score{feature="token_length",method="ks"})')[0]["value"][1])
        assert ks > 0.5, ks
    finally:
        launcher.stop_all()
        api.launcher.stop_all()
        shutil.rmtree(tmp_path / "data", ignore_errors=True)
