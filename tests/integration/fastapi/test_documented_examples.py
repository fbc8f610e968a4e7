"""Every request example of the FastAPI stack's HTTP API reference (its OpenAPI document, as the running server
serves it) succeeds when sent to that server."""

from __future__ import annotations

from tests.support.openapi_examples import documented_examples, request_bodies


def test_every_documented_request_example_succeeds(fastapi_server):
    with fastapi_server.client() as client:
        document = client.get("/openapi.json").json()
        examples = documented_examples(document, fill={"version": "1"})  # a path parameter without an example
        documented = {(example.method, example.template) for example in examples}
        assert documented == set(request_bodies(document)), "every route with a JSON body shows an example"
        for example in examples:
            answer = client.request(example.method, example.path, json=example.body)
            assert answer.status_code < 300, f"{example.method} {example.path} '{example.name}': {answer.text}"
