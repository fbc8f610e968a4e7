"""STACK=clearml: gateway workers tokenize and call a real Triton encoder over gRPC."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from services.common.contract import TOKENIZER_FILE, TensorSpec
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.modelbuild.export import VALIDATION_TEXTS
from services.monitoring.statistics import EndpointMetrics, Variable
from services.triton.repository import RenderOptions
from tests.support.models import reference_outputs as reference
from tests.support.servers import assert_tritonclient_http_works, start_gateway, start_triton, worker_pids

TEXTS = VALIDATION_TEXTS[:3]  # PyTorch's outputs for them were recorded at export


@pytest.fixture(scope="module")
def triton(tmp_path_factory, tiny_model):
    server = start_triton(
        tmp_path_factory.mktemp("gw-triton"), tiny_model, RenderOptions(batching=True), models=("encoder",)
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_model, triton):
    server = start_gateway(tmp_path_factory.mktemp("gateway"), tiny_model, triton)
    yield server
    server.launcher.stop_all()


def test_gateway_serves_the_same_embeddings_as_the_baseline(gateway, tiny_model):
    with gateway.client() as client:
        one = client.post("/serve/minilm", json={"text": TEXTS[0]})
        many = client.post("/serve/minilm/1", json={"texts": TEXTS}).json()
    assert one.status_code == 200 and one.headers["x-model-name"] == "tiny-bert"
    expected = reference(tiny_model, TEXTS)
    assert np.abs(np.array(one.json()["embedding"]) - expected[0]).max() <= 1e-5
    assert np.abs(np.array(many["embeddings"]) - expected).max() <= 1e-5


def test_openai_and_tritonclient_work_against_the_gateway(gateway, tiny_model):
    from openai import OpenAI

    expected = reference(tiny_model, TEXTS)
    result = OpenAI(base_url=gateway.url + "/v1", api_key="unused").embeddings.create(model="tiny-bert", input=TEXTS)
    assert np.abs(np.array([d.embedding for d in result.data]) - expected).max() <= 1e-5

    assert_tritonclient_http_works(gateway.url, TEXTS, expected)


@pytest.mark.parametrize(
    "path, content, status",
    [
        ("/serve/minilm", b'{"text": "hel', 400),
        ("/serve/minilm", b'{"text": 1}', 422),
        ("/serve/minilm", b'{"texts": ["a", "b"]' + b', "x": "' + b"a" * (1 << 20) + b'"}', 413),
        ("/serve/other", b'{"text": "a"}', 404),
        (
            "/v2/models/minilm/infer",
            b'{"inputs": [{"name": "X", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}',
            422,
        ),
        (
            "/v2/models/minilm/infer",
            b'{"inputs": [{"name": "TEXT", "shape": [2], "datatype": "BYTES", "data": ["a"]}]}',
            422,
        ),
    ],
)
def test_bad_input_is_refused_as_on_every_stack(gateway, path, content, status):
    with gateway.client() as client:
        response = client.post(path, content=content, headers={"content-type": "application/json"})
        assert response.status_code == status, response.text
        assert response.json()["error"]["message"]
        assert client.post("/serve/minilm", json={"text": "still serving"}).status_code == 200


def test_gateway_reports_per_stage_latency(gateway):
    with gateway.client() as client:
        client.post("/serve/minilm", json={"text": "measure me"})
        text = client.get("/metrics").text
    for stage in ("parse", "preprocess", "triton", "postprocess"):
        assert f'serving_stage_duration_seconds_count{{stage="{stage}"}}' in text


CLEARML_PREPROCESS = """
from tokenizers import Tokenizer


class Preprocess(object):
    def __init__(self):
        self.tokenizer = Tokenizer.from_file("{tokenizer}")

    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        encoding = self.tokenizer.encode(body["text"])
        state["tokens"] = len(encoding.ids)
        if collect_custom_statistics_fn:
            collect_custom_statistics_fn({{"tokens": len(encoding.ids), "lang": "en"}})
        return [[encoding.ids], [encoding.attention_mask], [encoding.type_ids]]

    def postprocess(self, data, state, collect_custom_statistics_fn=None):
        return {{"data": data.tolist(), "tokens": state["tokens"], "endpoint": self.model_endpoint.model}}
"""

ASYNC_CUSTOM_PREPROCESS = """
import asyncio


class Preprocess:
    def load(self, local_file_name):
        return {"factor": 2, "file": local_file_name}

    async def preprocess(self, body, state, collect_custom_statistics_fn=None):
        await asyncio.sleep(0)
        return body["x"]

    async def process(self, data, state, collect_custom_statistics_fn=None):
        return [v * 2 for v in data]

    def postprocess(self, data, state, collect_custom_statistics_fn=None):
        return {"y": data}
"""


def write_endpoints(path, endpoints: dict[str, EndpointConfig], metrics: dict | None = None) -> None:
    EndpointsFile(endpoints=endpoints, metrics=metrics or {}).write(path)


def test_clearml_preprocess_scripts_run_unmodified_and_reload_without_restart(gateway, tiny_model, tmp_path):
    endpoints_file = gateway.launcher.run_dir / "endpoints.json"
    script = tmp_path / "preprocess.py"
    script.write_text(CLEARML_PREPROCESS.format(tokenizer=tiny_model / TOKENIZER_FILE))
    custom = tmp_path / "custom.py"
    custom.write_text(ASYNC_CUSTOM_PREPROCESS)
    inputs = [
        TensorSpec(name=n, dtype="INT64", shape=[-1, -1]) for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    stop = threading.Event()
    codes: list[int] = []

    def steady_traffic():  # the built-in endpoint must not pause while the configuration changes
        with gateway.client() as client:
            while not stop.is_set():
                codes.append(client.post("/serve/minilm", json={"text": "steady"}).status_code)

    thread = threading.Thread(target=steady_traffic)
    thread.start()
    try:
        write_endpoints(
            endpoints_file,
            {
                "sst": EndpointConfig(
                    engine="triton",
                    model="encoder",
                    preprocess=str(script),
                    inputs=inputs,
                    outputs=[TensorSpec(name="embedding", dtype="FP32", shape=[-1, 32])],
                ),
                "double": EndpointConfig(
                    engine="custom", preprocess=str(custom), model_file="weights.bin", version="3"
                ),
            },
            # what the clearml-serving script reports with collect_custom_statistics_fn, declared as in clearml
            {
                "sst": EndpointMetrics(
                    variables={
                        "tokens": Variable(kind="scalar", buckets=[2, 4, 8]),
                        "lang": Variable(kind="enum", values=["en"]),
                    }
                )
            },
        )
        deadline = time.monotonic() + 15
        with gateway.client() as client:
            while time.monotonic() < deadline:
                response = client.post("/serve/sst", json={"text": "hello world"})
                if response.status_code == 200:
                    break
                time.sleep(0.2)
            assert response.status_code == 200, response.text
            body = response.json()
            assert np.abs(np.array(body["data"]) - reference(tiny_model, ["hello world"])).max() <= 1e-5
            assert body["tokens"] == 4 and body["endpoint"] == "encoder"
            # every worker has reloaded by now or soon: ask a few times
            for _ in range(6):
                assert client.post("/serve/sst", json={"text": "hello"}).status_code == 200
            assert client.post("/serve/double/3", json={"x": [1, 2]}).json() == {"y": [2, 4]}
            assert client.post("/serve/double/4", json={"x": [1]}).status_code == 404
            bad = client.post("/serve/sst", json={"no_text": 1})
            assert bad.status_code == 422 and "preprocess of endpoint 'sst' failed" in bad.json()["error"]["message"]
            metrics = client.get("/metrics").text
            assert 'serving_custom_sst_tokens_bucket{le="4.0",version="1"}' in metrics
            assert 'serving_custom_sst_lang_total{value="en",version="1"}' in metrics
            write_endpoints(endpoints_file, {})
            time.sleep(1.5)
            assert client.post("/serve/sst", json={"text": "gone"}).status_code == 404
    finally:
        stop.set()
        thread.join()
    assert codes and set(codes) == {200}


def test_kill_9_of_one_worker_fails_only_its_requests_and_gunicorn_replaces_it(tmp_path, tiny_model, triton):
    server = start_gateway(tmp_path, tiny_model, triton, workers=2)
    try:
        before = worker_pids(server.pid)
        assert len(before) == 2
        results: list[int] = []
        stop = threading.Event()

        def traffic():
            with httpx.Client(base_url=server.url, timeout=10) as client:
                while not stop.is_set():
                    try:
                        results.append(client.post("/serve/minilm", json={"text": "load"}).status_code)
                    except httpx.HTTPError:
                        results.append(-1)

        threads = [threading.Thread(target=traffic) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        time.sleep(3.0)
        stop.set()
        for thread in threads:
            thread.join()
        failures = [code for code in results if code != 200]
        assert len(failures) <= 4, f"more failures than requests in flight on the killed worker: {failures}"
        assert results.count(200) > 50
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(worker_pids(server.pid) - {victim}) < 2:
            time.sleep(0.2)
        after = worker_pids(server.pid)
        assert victim not in after and len(after) == 2
        with server.client() as client:
            assert all(client.post("/serve/minilm", json={"text": "x"}).status_code == 200 for _ in range(10))
    finally:
        server.launcher.stop_all()


def test_triton_down_is_503_with_retry_after_and_the_gateway_recovers(tmp_path, tiny_model):
    triton = start_triton(tmp_path / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",))
    server = start_gateway(tmp_path / "gw", tiny_model, triton, env={"GATEWAY_TRITON_TIMEOUT": "5"})
    try:
        with server.client() as client:
            assert client.post("/serve/minilm", json={"text": "up"}).status_code == 200
            triton.stop()
            start = time.monotonic()
            down = client.post("/serve/minilm", json={"text": "down"})
            assert time.monotonic() - start < 5, "answered within the deadline"
            assert down.status_code == 503 and down.headers["retry-after"] == "1"
            assert "unavailable" in down.json()["error"]["message"]
            time.sleep(1.1)  # readiness is cached for a second
            assert client.get("/health/ready").status_code == 503
            # Triton comes back on the same ports
            ports = triton.grpc_url.rsplit(":", 1)[1], triton.http_url.rsplit(":", 1)[1]
            revived = restart_triton_on(tmp_path / "triton2", tiny_model, triton)
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if client.post("/serve/minilm", json={"text": "back"}).status_code == 200:
                        break
                    time.sleep(0.3)
                assert client.post("/serve/minilm", json={"text": "back"}).status_code == 200, ports
            finally:
                revived.stop()
    finally:
        server.launcher.stop_all()
        triton.stop()


def restart_triton_on(tmp_path, model_dir, old):
    """A new Triton on the ports the old one used."""
    from services.launcher import Launcher
    from services.stacks import StackOptions, triton_service
    from services.triton.server import TritonPorts
    from tests.support.servers import TritonServer

    ports = TritonPorts(
        int(old.http_url.rsplit(":", 1)[1]),
        int(old.grpc_url.rsplit(":", 1)[1]),
        int(old.metrics_url.split(":")[2].split("/")[0]),
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    options = StackOptions(stack="clearml", model_dir=model_dir, run_dir=tmp_path, triton_ports=ports)
    spec = triton_service(options, models=["encoder"])
    launcher = Launcher(tmp_path)
    launcher.start_ready(spec, detach=True, timeout=120)
    return TritonServer(old.http_url, old.grpc_url, old.metrics_url, launcher)


def test_full_triton_queue_is_503_and_worker_bound_is_429(tmp_path, tiny_model):
    # Triton holds each lone request up to 0.5 s hoping to fill a batch, and queues at most 2.
    slow = RenderOptions(batching=True, max_queue_size=2, max_queue_delay_us=500_000)
    triton = start_triton(tmp_path / "triton", tiny_model, slow, models=("encoder",))
    # uncoalesced: each request its own Triton request, so 16 of them overflow Triton's queue of 2
    roomy = start_gateway(tmp_path / "gw", tiny_model, triton, workers=1, env={"GATEWAY_COALESCE": "false"})
    bounded = start_gateway(tmp_path / "gw1", tiny_model, triton, workers=1, env={"GATEWAY_MAX_INFLIGHT": "1"})

    def burst(server):
        def post(_):
            with httpx.Client(base_url=server.url, timeout=30) as client:
                return client.post("/serve/minilm", json={"text": "burst"})

        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(post, range(16)))

    try:
        responses = burst(roomy)
        codes = [r.status_code for r in responses]
        assert set(codes) == {200, 503}, codes
        full = next(r for r in responses if r.status_code == 503)
        assert "queue" in full.json()["error"]["message"] and full.headers["retry-after"] == "1"

        responses = burst(bounded)
        codes = [r.status_code for r in responses]
        assert 429 in codes and 200 in codes and set(codes) <= {200, 429, 503}, codes
        shed = next(r for r in responses if r.status_code == 429)
        assert shed.headers["retry-after"] == "1" and "limit" in shed.json()["error"]["message"]
    finally:
        bounded.launcher.stop_all()
        roomy.launcher.stop_all()
        triton.stop()


def test_sigterm_drains_the_gateway(tmp_path, tiny_model):
    slow = RenderOptions(batching=True, max_queue_delay_us=800_000)
    triton = start_triton(tmp_path / "triton", tiny_model, slow, models=("encoder",))
    server = start_gateway(tmp_path / "gw", tiny_model, triton, workers=1)
    pid = server.pid
    try:

        def post(_):
            with httpx.Client(base_url=server.url, timeout=30) as client:
                return client.post("/serve/minilm", json={"text": "drain me"}).status_code

        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(post, i) for i in range(3)]
            time.sleep(0.3)
            assert not any(f.done() for f in futures)
            os.killpg(pid, signal.SIGTERM)
            assert [f.result() for f in futures] == [200] * 3
    finally:
        server.launcher.stop_all()
        triton.stop()


def test_v2_routes_refuse_unknown_models_and_versions(gateway):
    with gateway.client() as client:
        assert client.get("/v2/models/minilm/versions/1/ready").status_code == 200
        for path in ("/v2/models/other", "/v2/models/minilm/versions/9", "/v2/models/minilm/versions/9/ready"):
            assert client.get(path).status_code == 404, path
        big = client.post("/v2/models/minilm/infer", content=b"x" * ((1 << 20) + 1))
        assert big.status_code == 413


def test_a_hand_corrupted_endpoint_file_leaves_the_valid_endpoints_serving_and_says_why(gateway, tmp_path):
    endpoints_file = gateway.launcher.run_dir / "endpoints.json"
    custom = tmp_path / "custom.py"
    custom.write_text(ASYNC_CUSTOM_PREPROCESS)
    endpoints_file.write_text(
        json.dumps(
            {
                "endpoints": {
                    "double": {"engine": "custom", "preprocess": str(custom)},
                    "ort": {"engine": "onnxruntime", "model": "build/model"},
                    "typo": {"engine": "tensorflow"},
                }
            }
        )
    )
    with gateway.client() as client:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and client.post("/serve/double", json={"x": [1]}).status_code != 200:
            time.sleep(0.2)
        time.sleep(1)  # every worker has reloaded
        for _ in range(4):
            assert client.post("/serve/double", json={"x": [1, 2]}).json() == {"y": [2, 4]}
            ready = client.get("/health/ready").json()
            assert "field 'outputs' is empty" in ready["config_errors"]["ort"]
            assert "field 'engine'" in ready["config_errors"]["typo"]
        missing = client.post("/serve/ort", json={"text": "x"})
        assert missing.status_code == 404
        assert "'minilm', 'double'" in missing.json()["error"]["message"]
        assert 'serving_config_errors{file="endpoints.json"} 2.0' in client.get("/metrics").text
    endpoints_file.write_text('{"endpoints": {}}')
