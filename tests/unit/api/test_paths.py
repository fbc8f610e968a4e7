"""The route table: the rules that sort requests by path agree with the routes the app declares."""

import pytest
from fastapi import FastAPI

from services.api import paths
from services.common.settings import ApiSettings
from services.fastapi_stack.app import create_app


def declared_routes() -> list[tuple[str, str]]:
    """(method, path) of every route the app documents, its parameters filled in."""
    app = create_app(ApiSettings())
    while not isinstance(app, FastAPI):
        app = app.app
    concrete = {"{endpoint}": "minilm", "{version}": "1", "{model}": "minilm"}
    found = []
    for template, operations in app.openapi()["paths"].items():
        path = template
        for name, value in concrete.items():
            path = path.replace(name, value)
        found += [(method.upper(), path) for method in operations]
    return found


def test_every_declared_post_route_runs_a_model_is_bounded_and_protected():
    routes = declared_routes()
    assert ("POST", "/serve/minilm") in routes and ("POST", "/v2/models/minilm/versions/1/infer") in routes
    for method, path in routes:
        runs_a_model = method == "POST"  # the API's only POST routes are its inference routes
        assert paths.is_inference(method, path) is runs_a_model, (method, path)
        if runs_a_model:
            assert path.startswith(paths.PROTECTED) and paths.route_label(path) != "other", path
        if path.startswith(("/health", "/metrics")):
            assert path.startswith(paths.UNMETERED)


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/serve/minilm", "/serve"),
        ("/serve/minilm/2", "/serve"),
        ("/v1/embeddings", "/v1/embeddings"),
        ("/v1/other", "other"),
        ("/v2/models/minilm/infer", "/v2"),
        ("/v2", "other"),
        ("/admin/models", "other"),
    ],
)
def test_route_labels_are_one_per_protocol(path, label):
    assert paths.route_label(path) == label


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/serve/minilm", ("minilm", None)),
        ("/serve/minilm/", ("minilm", None)),
        ("/serve/minilm/2", ("minilm", "2")),
        ("/serve/a/b/c", None),
        ("/serve//2", None),
        ("/serve/", None),
        ("/v1/embeddings", None),
    ],
)
def test_serve_target_is_the_endpoint_and_version_a_serve_path_names(path, target):
    assert paths.serve_target(path) == target
