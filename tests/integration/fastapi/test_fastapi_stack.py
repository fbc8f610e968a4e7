"""STACK=fastapi served by real gunicorn/uvicorn workers on a free port, over real HTTP."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from services.modelbuild.export import VALIDATION_TEXTS
from tests.support.models import reference_outputs as reference
from tests.support.servers import assert_tritonclient_http_works, start_http_stack

# Answers are compared with PyTorch's outputs for these texts, recorded when the model was exported.
TEXTS = VALIDATION_TEXTS[:4]


def test_serve_one_text(fastapi_server, tiny_model):
    with fastapi_server.client() as client:
        response = client.post("/serve/minilm", json={"text": "hello world"})
    assert response.status_code == 200
    body = response.json()
    assert response.headers["x-model-name"] == body["model"] == "tiny-bert"
    assert response.headers["x-model-version"] == body["version"] == "1"
    assert body["truncated"] is False and body["tokens"] == 4
    np.testing.assert_allclose(body["embedding"], reference(tiny_model, ["hello world"])[0], atol=1e-5)
    assert abs(np.linalg.norm(body["embedding"]) - 1) < 1e-5


def test_serve_many_texts_and_a_version(fastapi_server, tiny_model):
    texts = TEXTS[1:]
    with fastapi_server.client() as client:
        response = client.post("/serve/minilm/1", json={"texts": texts})
    assert response.status_code == 200
    body = response.json()
    np.testing.assert_allclose(body["embeddings"], reference(tiny_model, texts), atol=1e-5)
    assert len(body["tokens"]) == 3 and body["truncated"] == [False] * 3


def test_openai_client_against_v1_embeddings(fastapi_server, tiny_model):
    from openai import OpenAI

    client = OpenAI(base_url=fastapi_server.url + "/v1", api_key="unused")
    result = client.embeddings.create(model="tiny-bert", input=TEXTS[:2])
    vectors = np.array([item.embedding for item in result.data])
    np.testing.assert_allclose(vectors, reference(tiny_model, TEXTS[:2]), atol=1e-5)
    assert result.usage.prompt_tokens > 0
    floats = client.embeddings.create(model="tiny-bert", input="hello world", encoding_format="float")
    np.testing.assert_allclose(floats.data[0].embedding, vectors[0], atol=1e-6)


def test_openai_client_lists_the_models_v1_embeddings_accepts(fastapi_server):
    from openai import NotFoundError, OpenAI

    client = OpenAI(base_url=fastapi_server.url + "/v1", api_key="unused")
    listed = client.models.list().data
    assert [m.id for m in listed] == ["tiny-bert", "minilm"] and {m.owned_by for m in listed} == {"transformer-serving"}
    assert listed[0].created > 1_600_000_000 and client.models.retrieve("minilm").created == listed[0].created
    for model in listed:
        assert client.embeddings.create(model=model.id, input="hello").data[0].embedding
    with pytest.raises(NotFoundError, match="'tiny-bert', 'minilm'"):
        client.models.retrieve("gpt-4")


def test_tritonclient_http_speaks_the_open_inference_protocol_to_it(fastapi_server, tiny_model):
    assert_tritonclient_http_works(fastapi_server.url, TEXTS, reference(tiny_model, TEXTS))


def test_base64_encoding_is_little_endian_float32(fastapi_server):
    with fastapi_server.client() as client:
        raw = client.post("/v1/embeddings", json={"input": "hello", "encoding_format": "base64"}).json()
        plain = client.post("/v1/embeddings", json={"input": "hello"}).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, plain["data"][0]["embedding"], atol=1e-7)


@pytest.mark.parametrize(
    "path, content, headers, status, says",
    [
        ("/serve/minilm", b'{"text": "hel', {}, 400, "malformed JSON"),
        ("/serve/minilm", b"", {}, 400, "empty request body"),
        ("/serve/minilm", b'{"text": "caf\xe9"}', {}, 400, "not valid UTF-8"),
        ("/serve/minilm", b'{"text": 42}', {}, 422, "field 'text'"),
        ("/serve/minilm", b'{"texts": []}', {}, 422, "field 'texts'"),
        ("/serve/minilm", b'{"txt": "a"}', {}, 422, 'exactly one of "text"'),
        ("/serve/minilm", b'["a"]', {}, 422, "must be an object"),
        ("/serve/nope", b'{"text": "a"}', {}, 404, "no endpoint 'nope'"),
        ("/serve/minilm/7", b'{"text": "a"}', {}, 404, "no version '7'"),
        ("/no/such/route", b"{}", {}, 404, "no route POST /no/such/route"),
        ("/v1/embeddings", b'{"input": "a", "model": "gpt-4"}', {}, 404, "no model 'gpt-4'"),
        ("/v1/embeddings", b'{"input": "a", "dimensions": 3}', {}, 422, "dimensions=3"),
    ],
)
def test_bad_input_gets_a_clear_json_error(fastapi_server, path, content, headers, status, says):
    with fastapi_server.client() as client:
        response = client.post(path, content=content, headers={"content-type": "application/json", **headers})
        assert response.status_code == status, response.text
        assert says in response.json()["error"]["message"]
        # the worker keeps serving
        assert client.post("/serve/minilm", json={"text": "still here"}).status_code == 200


def test_body_over_the_limit_is_413(fastapi_server):
    with fastapi_server.client() as client:
        response = client.post("/serve/minilm", json={"text": "a" * (1 << 20)})
    assert response.status_code == 413
    assert "over the limit" in response.json()["error"]["message"]


def test_too_many_texts_is_413(fastapi_server):
    with fastapi_server.client() as client:
        response = client.post("/serve/minilm", json={"texts": ["a"] * 65})
        assert response.status_code == 413
        assert "limit is 64" in response.json()["error"]["message"]
        assert client.post("/serve/minilm", json={"texts": ["a"] * 64}).status_code == 200


def test_long_text_is_truncated_and_reported_or_rejected(fastapi_server):
    long_text = " ".join(["hello"] * 500)
    with fastapi_server.client() as client:
        body = client.post("/serve/minilm", json={"text": long_text}).json()
        assert body["truncated"] is True and body["tokens"] == 64
        rejected = client.post("/serve/minilm", json={"text": long_text, "truncate": False})
    assert rejected.status_code == 422
    assert "maximum of 64 tokens" in rejected.json()["error"]["message"]


def test_health_and_metrics_merge_all_workers(fastapi_server):
    with fastapi_server.client() as client:
        assert client.get("/health/live").json() == {"status": "alive"}
        ready = client.get("/health/ready")
        assert ready.status_code == 200 and ready.json()["model"] == "tiny-bert"
        for _ in range(20):
            client.post("/serve/minilm", json={"text": "count me"}, headers={"connection": "close"})
        text = client.get("/metrics").text
    assert 'serving_model_info{model="tiny-bert",task="embedding",version="1"} 1.0' in text
    counts = [
        line for line in text.splitlines() if line.startswith('serving_requests_total{code="200",route="/serve"}')
    ]
    assert counts and float(counts[0].split()[-1]) >= 20
    for stage in ("parse", "preprocess", "inference", "postprocess"):
        assert f'serving_stage_duration_seconds_bucket{{le="0.0001",stage="{stage}"}}' in text


def test_request_id_is_echoed(fastapi_server):
    with fastapi_server.client() as client:
        response = client.post("/serve/minilm", json={"text": "a"}, headers={"x-request-id": "abc123"})
    assert response.headers["x-request-id"] == "abc123"


def test_classifier_returns_labels(tmp_path, tiny_classifier):
    server = start_http_stack(tmp_path, tiny_classifier)
    try:
        with server.client() as client:
            one = client.post("/serve/minilm", json={"text": "good"}).json()
            many = client.post("/serve/minilm", json={"texts": ["good", "bad"]}).json()
            openai = client.post("/v1/embeddings", json={"input": "good"})
            listed = client.get("/v1/models").json()
        assert one["label"] in ("negative", "positive") and set(one["scores"]) == {"negative", "positive"}
        assert [p["label"] for p in many["predictions"]][0] == one["label"]
        assert openai.status_code == 422 and "classifier" in openai.json()["error"]["message"]
        assert listed == {"object": "list", "data": []}  # /v1/embeddings accepts no model of this server
    finally:
        server.launcher.stop_all()


def test_overload_is_shed_with_429_and_retry_after(tmp_path, tiny_model):
    server = start_http_stack(tmp_path, tiny_model, env={"SERVING_MAX_INFLIGHT": "1", "SERVING_INTRA_OP_THREADS": "1"})
    texts = [" ".join(["hello world"] * 30)] * 64
    try:

        def post(_):
            with server.client() as client:
                return client.post("/serve/minilm", json={"texts": texts})

        with ThreadPoolExecutor(32) as pool:
            responses = list(pool.map(post, range(64)))
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 429}, codes
        assert 429 in codes and 200 in codes
        shed = next(r for r in responses if r.status_code == 429)
        assert shed.headers["retry-after"] == "1" and "retry" in shed.json()["error"]["message"]
    finally:
        server.launcher.stop_all()
