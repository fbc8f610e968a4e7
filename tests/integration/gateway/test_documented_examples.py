"""Every request example of the gateway's HTTP API reference (its OpenAPI document, as the running gateway serves it)
succeeds when sent to that gateway: the inference routes on the built-in model, the admin routes (with the admin
token) on an endpoint whose versions 1 and 2 are live, as their examples say."""

from __future__ import annotations

import pytest

from services.lifecycle import transitions
from services.lifecycle.deployments import VersionState
from services.lifecycle.store import DeploymentStore
from tests.support.openapi_examples import documented_examples, request_bodies
from tests.support.servers import start_gateway

TOKEN = "documented-examples"
ENDPOINT = "sentiment"


@pytest.fixture(scope="module")
def gateway_with_admin(tmp_path_factory, tiny_model, triton):
    tmp = tmp_path_factory.mktemp("gateway-admin")
    url = f"sqlite:///{tmp / 'state.db'}"
    store = DeploymentStore.open(url)
    store.update(lambda s: transitions.set_auto_update(s, ENDPOINT, ENDPOINT, 2))
    for version in ("1", "2"):
        store.update(
            lambda s, v=version: s.endpoints[ENDPOINT].versions.setdefault(v, VersionState(version=v, state="live"))
        )
    server = start_gateway(
        tmp, tiny_model, triton, workers=1, env={"SERVING_STATE_URL": url, "GATEWAY_ADMIN_TOKEN": TOKEN}
    )
    yield server
    server.launcher.stop_all()


def test_every_documented_request_example_succeeds(gateway_with_admin):
    with gateway_with_admin.client() as client:
        document = client.get("/openapi.json").json()
        examples = documented_examples(document, fill={"endpoint": ENDPOINT, "version": "1"})
        assert {(e.method, e.template) for e in examples} == set(request_bodies(document)), (
            "every route with a JSON body shows an example"
        )
        assert any(e.template.startswith("/admin/") for e in examples)
        for example in examples:
            headers = {"Authorization": f"Bearer {TOKEN}"} if example.template.startswith("/admin/") else {}
            answer = client.request(example.method, example.path, json=example.body, headers=headers)
            assert answer.status_code < 300, f"{example.method} {example.path} '{example.name}': {answer.text}"
