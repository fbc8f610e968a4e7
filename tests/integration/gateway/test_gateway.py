"""STACK=clearml: gateway workers tokenize and call a real Triton encoder over gRPC."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from services.common.contract import TOKENIZER_FILE, TensorSpec
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.modelbuild.export import VALIDATION_TEXTS
from services.monitoring.statistics import EndpointMetrics, Variable
from tests.support.models import reference_outputs as reference
from tests.support.servers import assert_tritonclient_http_works

TEXTS = VALIDATION_TEXTS[:3]  # PyTorch's outputs for them were recorded at export


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
    client = OpenAI(base_url=gateway.url + "/v1", api_key="unused")
    result = client.embeddings.create(model="tiny-bert", input=TEXTS)
    assert np.abs(np.array([d.embedding for d in result.data]) - expected).max() <= 1e-5
    assert [m.id for m in client.models.list()] == ["tiny-bert", "minilm"]

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


def configure_sst_and_double(endpoints_file, tiny_model, tmp_path) -> None:
    """`sst`: the clearml-serving script in front of Triton's encoder, with its statistics declared as in clearml;
    `double`: an async custom engine at version 3."""
    script = tmp_path / "preprocess.py"
    script.write_text(CLEARML_PREPROCESS.format(tokenizer=tiny_model / TOKENIZER_FILE))
    custom = tmp_path / "custom.py"
    custom.write_text(ASYNC_CUSTOM_PREPROCESS)
    inputs = [
        TensorSpec(name=n, dtype="INT64", shape=[-1, -1]) for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
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
            "double": EndpointConfig(engine="custom", preprocess=str(custom), model_file="weights.bin", version="3"),
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


def test_clearml_preprocess_scripts_run_unmodified_and_reload_without_restart(gateway, tiny_model, tmp_path):
    endpoints_file = gateway.launcher.run_dir / "endpoints.json"
    stop = threading.Event()
    codes: list[int] = []

    def steady_traffic():  # the built-in endpoint must not pause while the configuration changes
        with gateway.client() as client:
            while not stop.is_set():
                codes.append(client.post("/serve/minilm", json={"text": "steady"}).status_code)

    thread = threading.Thread(target=steady_traffic)
    thread.start()
    try:
        configure_sst_and_double(endpoints_file, tiny_model, tmp_path)
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
