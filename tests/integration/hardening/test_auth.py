"""API keys on a real FastAPI stack: who may call what."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.servers import start_http_stack

KEYS = ["first-key-0123456789", "second-key-9876543210"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("auth")
    (tmp / "keys").write_text(f"# inference keys\n{KEYS[1]}\n")
    env = {
        "SERVING_API_KEYS": json.dumps(KEYS[:1]),
        "SERVING_API_KEYS_FILE": str(tmp / "keys"),
        "SERVING_PROTECT_METRICS": "true",
        "SERVING_OBSERVABILITY__LOG_JSON": "true",
    }
    server = start_http_stack(tmp, tiny_model, env=env)
    yield server
    server.launcher.stop_all()


@pytest.mark.parametrize("path", ["/serve/minilm", "/v1/embeddings", "/v2/models/minilm/infer", "/metrics"])
@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {KEYS[0]}", f"Bearer {KEYS[0][:-1]}"])
def test_without_a_valid_key_it_is_401_with_a_json_body(server, path, header):
    headers = {"Authorization": header} if header else {}
    method = "GET" if path == "/metrics" else "POST"
    response = httpx.request(method, server.url + path, json={"text": "x"}, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["type"] == "unauthorized"


def test_keys_from_the_setting_and_the_file_work_and_the_openai_client_sends_its_key(server):
    from openai import OpenAI

    for key in KEYS:
        response = httpx.post(
            server.url + "/serve/minilm", json={"text": "hello"}, headers={"Authorization": f"Bearer {key}"}, timeout=10
        )
        assert response.status_code == 200
    result = OpenAI(base_url=server.url + "/v1", api_key=KEYS[1]).embeddings.create(model="tiny-bert", input="hi")
    assert len(result.data[0].embedding) == 32
    assert httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {KEYS[0]}"}).status_code == 200


def test_health_stays_open_and_keys_never_reach_the_log(server):
    assert httpx.get(server.url + "/health/ready", timeout=10).status_code == 200
    assert httpx.get(server.url + "/health/live", timeout=10).status_code == 200
    log = (server.launcher.run_dir / "logs" / "api.log").read_text()
    assert log and not any(key in log or key[:-1] in log for key in KEYS)
