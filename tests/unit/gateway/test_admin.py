"""The admin API in a bare FastAPI app with the project's error edge: the token, each route's answer and its
change to the deployment state store, refusals mapped to their status, and every route a plain function (run in the
thread pool: the store's queries never block an event loop)."""

from __future__ import annotations

import asyncio
import inspect
import shutil
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from services.api.errors import install_error_handlers
from services.common.errors import ConfigurationError
from services.common.names import NAME_PATTERN, REGISTERED_RULE
from services.gateway.admin import admin_router
from services.lifecycle import transitions
from services.lifecycle.deployments import VersionState
from services.lifecycle.store import DeploymentStore
from tests.support.state import stored, write_document

AUTH = {"Authorization": "Bearer secret"}


def admin_settings(token: str | None = None, token_file: Path | None = None, max_body: int = 64 * 1024):
    """What `admin_router` reads of the gateway's settings."""
    secret = SecretStr(token) if token is not None else None
    return SimpleNamespace(admin_token=secret, admin_token_file=token_file, admin_max_body_bytes=max_body)


def app_with(store: DeploymentStore | None, token: str | None = "secret", settings=None) -> FastAPI:
    settings = settings or admin_settings(token)
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(admin_router(settings, store))
    return app


@pytest.fixture
def store(tmp_path) -> DeploymentStore:
    store = DeploymentStore.open(f"sqlite:///{tmp_path / 'lifecycle' / 'state.db'}")
    store.update(lambda s: transitions.set_auto_update(s, "emb", "m", 2))
    for version in ("1", "2"):
        store.update(
            lambda s, v=version: s.endpoints["emb"].versions.setdefault(v, VersionState(version=v, state="live"))
        )
    return store


@pytest.fixture
def client(store) -> TestClient:
    return TestClient(app_with(store))


def endpoints(routes: list) -> list:
    """The route functions, through included routers."""
    found = []
    for route in routes:
        included = getattr(route, "original_router", None)
        found += endpoints(included.routes) if included is not None else [route.endpoint]
    return found


def test_every_route_is_a_plain_function_run_off_the_event_loop(store):
    found = endpoints(admin_router(admin_settings(), store).routes)
    assert len(found) == 7 and not any(inspect.iscoroutinefunction(f) for f in found)


def test_the_admin_routes_need_the_token_and_are_off_without_one(store, client):
    assert client.get("/admin/endpoints").status_code == 401
    assert client.get("/admin/endpoints", headers={"Authorization": "Bearer nope"}).status_code == 401
    off = TestClient(app_with(store, token=None)).get("/admin/endpoints", headers=AUTH)
    assert off.status_code == 503 and "GATEWAY_ADMIN_TOKEN" in off.json()["error"]["message"]
    unset = TestClient(app_with(None)).get("/admin/endpoints", headers=AUTH)
    assert unset.status_code == 503 and "SERVING_STATE_URL" in unset.json()["error"]["message"]


def test_changes_are_written_to_the_state_and_answered(store, client):
    answer = client.put("/admin/endpoints/new/auto-update", json={"name": "n", "max_versions": 3}, headers=AUTH)
    assert answer.json() | {"new_versions": None} == {
        "endpoint": "new",
        "registered_name": "n",
        "max_versions": 3,
        "rollout": None,
        "new_versions": None,
    }
    assert store.read().endpoints["new"].registered_name == "n"
    answer = client.put("/admin/endpoints/emb/canary", json={"versions": ["1", "2"], "weights": [1, 3]}, headers=AUTH)
    assert answer.json() == {"endpoint": "emb", "traffic": {"1": 0.25, "2": 0.75}}
    answer = client.post("/admin/endpoints/emb/rollout", json={"version": "2"}, headers=AUTH)
    assert answer.json()["rollout"] | {"steps": None} == answer.json()["rollout"] | {"steps": None, "stable": "1"}
    assert store.read().endpoints["emb"].rollout.steps == [10, 50, 100]
    answer = client.delete("/admin/endpoints/emb/versions/1", headers=AUTH)
    assert answer.json() == {"endpoint": "emb", "version": "1", "state": "draining"}
    listed = client.get("/admin/endpoints", headers=AUTH).json()["endpoints"]
    assert [e["endpoint"] for e in listed] == ["emb", "new"]
    assert [(v["version"], v["state"]) for v in listed[0]["versions"]] == [("2", "live"), ("1", "draining")]


def test_a_rejected_version_is_deployed_again_and_listed_with_why(store, client):
    store.update(lambda s: transitions.reject(s, "emb", "2", "rolled back"))
    answer = client.post("/admin/endpoints/emb/versions/2/redeploy", headers=AUTH)
    assert answer.json() == {"endpoint": "emb", "version": "2", "state": "loading"}
    versions = client.get("/admin/endpoints", headers=AUTH).json()["endpoints"][0]["versions"]
    assert [(v["version"], v["state"], v["share_reason"]) for v in versions] == [
        ("2", "loading", "loading: no traffic until its checks pass"),
        ("1", "live", "newest live version: takes all"),
    ]
    again = client.post("/admin/endpoints/emb/versions/1/redeploy", headers=AUTH)
    assert again.status_code == 409 and "live already" in again.json()["error"]["message"]


def test_auto_update_takes_a_rollout_policy_and_the_listing_says_what_new_versions_get(store, client):
    listed = client.get("/admin/endpoints", headers=AUTH).json()["endpoints"][0]
    assert listed["rollout_policy"] is None and listed["new_versions"].startswith("take all traffic once live")
    body = {"name": "m", "rollout": {"dwell": 30}}
    answer = client.put("/admin/endpoints/emb/auto-update", json=body, headers=AUTH).json()
    assert answer["rollout"]["dwell"] == 30 and answer["rollout"]["min_requests"] == 200
    assert store.read().endpoints["emb"].rollout_policy.steps == [10, 50, 100]
    listed = client.get("/admin/endpoints", headers=AUTH).json()["endpoints"][0]
    assert listed["new_versions"] == (
        "rolled out while another version serves: steps 10,50,100%, dwell 30 s, max error rate 0.01, max p99 ratio "
        "1.5, 200 requests a step"
    )
    refused = client.put(
        "/admin/endpoints/emb/auto-update", json={"name": "m", "rollout": {"steps": [50, 10]}}, headers=AUTH
    )
    assert refused.status_code == 422 and "increasing percentages" in refused.text


def test_a_dry_run_rollout_answers_the_rollout_and_changes_nothing(store, client):
    before = store.read()
    answer = client.post("/admin/endpoints/emb/rollout", json={"version": "1", "dry_run": True}, headers=AUTH)
    assert answer.json()["dry_run"] is True and answer.json()["rollout"]["stable"] == "2"
    assert answer.json()["rollout"]["min_requests"] == 200
    assert store.read() == before
    refused = client.post("/admin/endpoints/emb/rollout", json={"version": "7", "dry_run": True}, headers=AUTH)
    assert refused.status_code == 409 and store.read() == before


@pytest.mark.parametrize(
    "method, path, body, status, says",
    [
        ("put", "/admin/endpoints/encoder/auto-update", {"name": "n"}, 422, "built-in stack"),
        ("put", "/admin/endpoints/nope/canary", {"newest": 1, "weights": [1]}, 404, "no deployed endpoint 'nope'"),
        (
            "put",
            "/admin/endpoints/emb/canary",
            {"versions": ["7"], "weights": [1]},
            409,
            "'emb' has no version 7",
        ),
        ("put", "/admin/endpoints/emb/canary", {"versions": ["1"], "weights": [1, 2]}, 422, "2 weights for 1 versions"),
        ("post", "/admin/endpoints/emb/rollout", {"version": "2", "steps": [50, 10]}, 422, "increasing percentages"),
        ("delete", "/admin/endpoints/emb/versions/9", None, 404, "'emb' has no version 9"),
    ],
)
def test_refusals_answer_with_their_status_and_change_nothing(store, client, method, path, body, status, says):
    before = stored(store)
    answer = client.request(method.upper(), path, json=body, headers=AUTH)
    assert answer.status_code == status and says in answer.json()["error"]["message"]
    assert stored(store) == before


def test_the_lineage_route_is_open_and_names_what_is_deployed(store, client, tmp_path):
    store.update(lambda s: setattr(s.endpoints["emb"].versions["1"], "lineage", {"run": {"id": "r1"}}))
    versions = client.get("/models/emb").json()["versions"]
    assert [(v["version"], v["traffic_share"]) for v in versions] == [("2", 1.0), ("1", 0.0)]
    assert versions[1]["run"] == {"id": "r1"}
    assert client.get("/models/nope").status_code == 404
    unset = TestClient(app_with(None)).get("/models/emb")
    assert unset.status_code == 404 and "no deployment state" in unset.json()["error"]["message"]


BAD_NAMES = ["..", "a..b", "Emb", "a b", "e" * 64, "-e", "%2e%2e", "a%0Ab", "a%00b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_every_route_refuses_a_bad_endpoint_name_with_the_pattern_and_changes_nothing(store, client, name):
    """Before: any name was accepted (schemathesis created 28, '..' and names with newlines among them)."""
    before = stored(store)
    for method, path, body in [
        ("PUT", f"/admin/endpoints/{name}/auto-update", {"name": "n"}),
        ("PUT", f"/admin/endpoints/{name}/canary", {"newest": 1, "weights": [1]}),
        ("POST", f"/admin/endpoints/{name}/rollout", {"version": "2"}),
        ("DELETE", f"/admin/endpoints/{name}/versions/1", None),
        ("GET", f"/models/{name}", None),
    ]:
        answer = client.request(method, path, json=body, headers=AUTH)
        if answer.status_code == 404:  # '..' is resolved by the client: no route at all
            assert "no route" in answer.json()["error"]["message"], (method, path, answer.text)
            continue
        assert answer.status_code == 422, (method, path, answer.text)
        assert NAME_PATTERN in answer.json()["error"]["message"]
    assert stored(store) == before


def test_a_version_in_the_path_is_a_number(client):
    answer = client.delete("/admin/endpoints/emb/versions/1x", headers=AUTH)
    assert answer.status_code == 422 and "version" in answer.json()["error"]["message"]


@pytest.mark.parametrize("content", ["{ nope", '{"endpoints": {"e": {"versions": 3}}}', ""])
def test_an_unreadable_state_is_a_503_without_the_stores_address_or_the_parsers_text(store, client, content, caplog):
    """Before: `GET /models/{endpoint}` (open) answered 500 with the state file's absolute path and pydantic's text."""
    write_document(store, content)
    for method, path in [("GET", "/models/emb"), ("GET", "/admin/endpoints"), ("PUT", "/admin/endpoints/emb/canary")]:
        answer = client.request(method, path, json={"newest": 1, "weights": [1]}, headers=AUTH)
        print(f"\n{method} {path} -> {answer.status_code} {answer.text}")
        assert answer.status_code == 503, answer.text
        assert "state.db" not in answer.text and "validation error" not in answer.text.lower()
        assert "server log" in answer.json()["error"]["message"]
    assert store.url in caplog.text and "is invalid" in caplog.text, "the log has the details"


def test_an_unreachable_store_is_a_503_without_its_address(store, client, tmp_path, caplog):
    shutil.move(tmp_path / "lifecycle", tmp_path / "away")
    for method, path in [("GET", "/models/emb"), ("GET", "/admin/endpoints"), ("PUT", "/admin/endpoints/emb/canary")]:
        answer = client.request(method, path, json={"newest": 1, "weights": [1]}, headers=AUTH)
        assert answer.status_code == 503 and answer.headers["retry-after"] == "5", answer.text
        assert str(tmp_path) not in answer.text and "unable to open" not in answer.text
        assert "nothing was changed" in answer.json()["error"]["message"], "says what happened and what to do"
    assert "unreachable: unable to open database file" in caplog.text


def test_a_worker_restarted_on_an_emptied_store_answers_503_and_writes_nothing_into_it(store, tmp_path, caplog):
    """The admin API of a new worker over a store file emptied meanwhile: no table created, no change written into
    an empty state (the change would become the whole state), and the log says what to do."""
    path = tmp_path / "lifecycle" / "state.db"
    path.write_bytes(b"")
    restarted = TestClient(app_with(DeploymentStore.open(store.url)))
    for method, path_, body in [
        ("PUT", "/admin/endpoints/sst2/auto-update", {"name": "m"}),
        ("GET", "/admin/endpoints", None),
        ("GET", "/models/emb", None),
    ]:
        answer = restarted.request(method, path_, json=body, headers=AUTH)
        assert answer.status_code == 503 and "state.db" not in answer.text, (method, path_, answer.text)
    assert path.stat().st_size == 0
    assert "lost its state: the store's file is empty (0 bytes)" in caplog.text
    assert "`serving state restore FILE`" in caplog.text


@pytest.mark.parametrize(
    "command",
    [
        ["auto-update", "../x", "--name", "m"],
        ["canary", "a\nb", "--newest", "1", "--weights", "1"],
        ["rollout", "Emb", "--version", "2"],
        ["remove", "..", "--version", "1"],
    ],
)
def test_serving_model_refuses_a_bad_endpoint_name_before_calling_the_gateway(command):
    from typer.testing import CliRunner

    from services.cli import app

    result = CliRunner().invoke(app, ["model", *command, "--url", "http://127.0.0.1:1", "--token", "t"])
    assert result.exit_code == 2 and NAME_PATTERN in result.output.replace("\n", ""), result.output
    assert "did not answer" not in result.output


@pytest.mark.parametrize(
    "token, content, says",
    [
        ("", None, "GATEWAY_ADMIN_TOKEN is empty or blank"),
        (" \t", None, "GATEWAY_ADMIN_TOKEN is empty or blank"),
        (None, "", "(GATEWAY_ADMIN_TOKEN_FILE) is empty or blank"),
        (None, "\n  \n", "(GATEWAY_ADMIN_TOKEN_FILE) is empty or blank"),
        (None, "one\ntwo\n", "holds several lines"),
        (None, b"\xff\xfe", "cannot be read (it is not UTF-8 text)"),
        (None, "a directory", "cannot be read (Is a directory)"),
    ],
)
def test_a_blank_or_unreadable_admin_token_stops_the_start(store, tmp_path, token, content, says):
    """The attack: with an empty token file, `Authorization: Bearer` and nothing after it was the token (200 on PUT
    .../auto-update). Now building the routes fails, with the fix in the message."""
    path = None
    if content == "a directory":
        path = tmp_path / "token-dir"
        path.mkdir()
    elif content is not None:
        path = tmp_path / "admin-token"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigurationError, match="GATEWAY_ADMIN_TOKEN") as refused:
        app_with(store, settings=admin_settings(token, path))
    assert says in refused.value.message and ("secrets.token_urlsafe" in refused.value.message or "read" in says)


def test_a_token_file_that_does_not_exist_leaves_the_admin_api_off_and_a_good_one_is_stripped(store, tmp_path):
    off = TestClient(app_with(store, settings=admin_settings(token_file=tmp_path / "missing")))
    assert off.get("/admin/endpoints", headers=AUTH).status_code == 503
    (tmp_path / "admin-token").write_text("  secret \n")
    on = TestClient(app_with(store, settings=admin_settings(token_file=tmp_path / "admin-token")))
    assert on.get("/admin/endpoints", headers=AUTH).status_code == 200
    assert on.get("/admin/endpoints", headers={"Authorization": "Bearer"}).status_code == 401


def asgi_request(app, method: str, path: str, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, dict, int]:
    """One request straight into the ASGI app, its body in `chunks`: the status, the JSON answer, and how many of
    the chunks the app asked for."""
    taken = 0
    messages: list[dict] = []

    async def receive() -> dict:
        nonlocal taken
        if taken == len(chunks):
            return {"type": "http.disconnect"}
        taken += 1
        return {"type": "http.request", "body": chunks[taken - 1], "more_body": taken < len(chunks)}

    async def send(message: dict) -> None:
        messages.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }
    asyncio.run(app(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return messages[0]["status"], orjson.loads(body), taken


MIB = [b"x" * 65536] * 16
"""A 1 MiB body in 64 KiB chunks, sent without Content-Length."""


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer"}, {"Authorization": "Bearer nope"}])
def test_a_request_without_the_token_is_refused_before_any_byte_of_its_body_is_read(store, headers):
    """The attack: a 300 MB body without a token was read and parsed (422 "JSON decode error", the worker's memory
    218 -> 821 MB) before the token was looked at."""
    path = "/admin/endpoints/emb/auto-update"
    status, answer, taken = asgi_request(app_with(store), "PUT", path, headers, MIB)
    assert (status, answer["error"]["type"], taken) == (401, "unauthorized", 0)
    declared = headers | {"Content-Length": str(300 << 20)}
    status, _, taken = asgi_request(app_with(store), "PUT", path, declared, MIB)
    assert (status, taken) == (401, 0)


def test_an_admin_body_over_the_cap_is_refused_with_413_as_it_arrives(store):
    app = app_with(store, settings=admin_settings("secret", max_body=65536))
    path = "/admin/endpoints/emb/auto-update"
    status, answer, taken = asgi_request(app, "PUT", path, AUTH, MIB)
    assert (status, answer["error"]["type"], taken) == (413, "payload_too_large", 2), "stopped at the first byte over"
    assert "65536" in answer["error"]["message"]
    status, _, taken = asgi_request(app, "PUT", path, AUTH | {"Content-Length": str(300 << 20)}, MIB)
    assert (status, taken) == (413, 0), "a declared length over the cap is refused before the body"
    ok = b'{"name": "m2", "max_versions": 1}'
    status, answer, _ = asgi_request(app, "PUT", path, AUTH | {"Content-Type": "application/json"}, [ok[:9], ok[9:]])
    assert (status, answer["registered_name"], answer["max_versions"]) == (200, "m2", 1)
    assert store.read().endpoints["emb"].registered_name == "m2"


def test_serving_model_refuses_an_empty_token_file_before_calling_the_gateway(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from services.cli import app

    monkeypatch.setenv("SERVING_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("GATEWAY_ADMIN_TOKEN", raising=False)
    (tmp_path / "admin-token").write_text(" \n")
    result = CliRunner().invoke(app, ["model", "list", "--url", "http://127.0.0.1:1"])
    output = result.output.replace("\n", " ")
    assert result.exit_code == 2 and "admin-token is empty" in output and "did not answer" not in output, output


BAD_REGISTERED_NAMES = ["a\x00b", "a\nb", "tab\tname", "a" * 60_000, "", " lead", "a/b", "a:b", "..", "a\\b", "\u200b"]
"""Before: each was stored as the endpoint's registered model, shown on the open `GET /models/{endpoint}` and pasted
into the registry's filter strings (the 60,000-character one too)."""


@pytest.mark.parametrize("name", BAD_REGISTERED_NAMES)
def test_auto_update_refuses_a_bad_registered_name_naming_the_rule_and_stores_nothing(store, client, name):
    before = stored(store)
    answer = client.put("/admin/endpoints/emb/auto-update", json={"name": name}, headers=AUTH)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert REGISTERED_RULE in error["message"] and error["param"] == "body.name"
    assert len(answer.content) < 2000 and error["message"].isprintable(), "cut short, control characters escaped"
    assert stored(store) == before
    assert client.get("/models/emb").json()["registered_name"] == "m"


def test_a_registered_name_mlflow_takes_is_taken(store, client):
    for name in ("my-model", "Bob's model v2", "a" * 256, "métis"):
        answer = client.put("/admin/endpoints/emb/auto-update", json={"name": name}, headers=AUTH)
        assert answer.status_code == 200 and store.read().endpoints["emb"].registered_name == name, answer.text


@pytest.mark.parametrize(
    "path, body, says",
    [
        ("auto-update", {"name": "m", "max_versions": 65}, "less than or equal to 64"),
        ("auto-update", {"name": "m", "max_versions": 10**30}, "less than or equal to 64"),
        ("auto-update", {"name": "m", "max_versions": 1e30}, "max_versions"),
        ("canary", {"newest": 65, "weights": [1]}, "less than or equal to 64"),
        ("canary", {"versions": ["1"] * 65, "weights": [1] * 65}, "at most 64 items"),
        ("canary", {"versions": ["../1"], "weights": [1]}, "should match pattern"),
    ],
)
def test_the_admin_bodies_numbers_have_upper_bounds(store, client, path, body, says):
    """Before: `max_versions` of 10**30 was stored, and a canary over any number of versions."""
    before = stored(store)
    answer = client.put(f"/admin/endpoints/emb/{path}", json=body, headers=AUTH)
    assert answer.status_code == 422 and says in answer.json()["error"]["message"], answer.text
    assert stored(store) == before


@pytest.mark.parametrize("body", ['{"newest": 1, "weights": [NaN]}', '{"newest": 2, "weights": [Infinity, 1]}'])
def test_a_weight_that_is_not_a_finite_number_is_refused(store, client, body):
    """Python's JSON parser takes `NaN` and `Infinity`: a NaN weight passed every comparison of the old checks."""
    before = stored(store)
    answer = client.put(
        "/admin/endpoints/emb/canary", content=body, headers=AUTH | {"Content-Type": "application/json"}
    )
    assert answer.status_code == 422 and "finite number" in answer.json()["error"]["message"], answer.text
    assert stored(store) == before


def test_the_admin_api_never_accepts_what_the_deployment_state_refuses():
    """The bodies' bounds are the state's (each accepted value is a valid state), so that a change the door took is
    never refused whole by every reader of the state."""
    from services.gateway.admin import MOST_VERSIONS
    from services.lifecycle.deployments import EndpointState

    EndpointState(max_versions=MOST_VERSIONS, newest_weights=[1.0] * MOST_VERSIONS)


@pytest.mark.parametrize(
    "path, body",
    [
        ("auto-update", {"name": "m", "rollout": {"dwell": 1e308}}),
        ("auto-update", {"name": "m", "rollout": {"max_wait": 1e30}}),
        ("rollout", {"version": "2", "dwell": 1e308}),
        ("rollout", {"version": "2", "max_wait": 1e30, "dry_run": True}),
    ],
)
def test_the_rollout_policys_seconds_have_upper_bounds(store, client, path, body):
    """Before: `dwell=1e308` was stored: a rollout step that never ends."""
    before = stored(store)
    method = "PUT" if path == "auto-update" else "POST"
    answer = client.request(method, f"/admin/endpoints/emb/{path}", json=body, headers=AUTH)
    assert answer.status_code == 422 and "less than or equal to" in answer.json()["error"]["message"], answer.text
    assert stored(store) == before


@pytest.mark.parametrize(
    "command",
    [
        ["model", "auto-update", "emb", "--name", "a\x01b"],
        ["model", "auto-update", "emb", "--name", "a/b"],
        ["model", "register", "--name", "x" * 300],
        ["train", "--name", "a\nb"],
    ],
)
def test_the_commands_refuse_a_bad_registered_name_before_calling_anything(command):
    from typer.testing import CliRunner

    from services.cli import app

    extra = ["--url", "http://127.0.0.1:1", "--token", "t"] if command[1] == "auto-update" else []
    result = CliRunner().invoke(app, [*command, *extra])
    output = result.output.replace("\n", "")
    assert result.exit_code == 2 and REGISTERED_RULE.replace(" ", "") in output.replace(" ", ""), result.output
    assert "did not answer" not in output
