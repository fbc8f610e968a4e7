"""Which endpoint a name resolves to: the built-in one first, then the sources' in order; a pipeline is no model;
every NotFound lists what is served; a name whose versions are still being loaded is a 503 to retry."""

import pytest

from services.api.catalog import Catalog
from services.api.endpoint import LOADING_RETRY_AFTER_S, Endpoints, PipelineEndpoint
from services.common.errors import NotFound, Unavailable
from services.monitoring.statistics import EndpointMetrics
from tests.unit.api.fakes import Fixed, make_dataplane, serve_also


@pytest.fixture
def catalog(tmp_path):
    return make_dataplane(tmp_path).catalog


def pipeline(name: str, version: str) -> PipelineEndpoint:
    return type("P", (PipelineEndpoint,), {"name": name, "version": version})()


def test_endpoints_resolve_to_the_builtin_model_then_the_sources(catalog):
    assert catalog.resolve("custom").version == "7"
    assert catalog.model_for("minilm", "1").endpoint == "minilm"
    assert catalog.model_for("other").version == "3"
    with pytest.raises(NotFound, match="this server serves 'minilm', 'custom', 'other'"):
        catalog.resolve("nope")
    with pytest.raises(NotFound, match="available: '1'"):
        catalog.model_for("minilm", "2")
    with pytest.raises(NotFound, match="runs preprocess code"):
        catalog.model_for("custom")


def test_a_model_name_is_the_builtin_model_or_an_endpoint(catalog):
    assert catalog.model_named(None).endpoint == "minilm"
    assert catalog.model_named("unit-embedding").endpoint == "minilm"
    assert catalog.model_named("other").version == "3"
    with pytest.raises(NotFound, match="no model 'gpt'"):
        catalog.model_named("gpt")


def test_find_gives_the_endpoint_with_the_statistics_declared_for_its_name(catalog):
    declared = catalog.declared("custom")
    assert isinstance(declared, EndpointMetrics)
    assert catalog.find("custom") == (catalog.resolve("custom"), declared)
    assert catalog.find("minilm") == (catalog.builtin, None)
    serve_also(catalog, minilm=declared)  # the endpoint file may declare statistics for any endpoint
    assert catalog.find("minilm")[1] is declared
    with pytest.raises(NotFound, match="no endpoint 'nope'"):
        catalog.find("nope")


def test_models_are_the_names_a_model_may_be_asked_for_with_their_live_versions(catalog):
    listed = catalog.models()
    assert list(listed) == ["unit-embedding", "minilm", "other"]  # the pipeline 'custom' names no model
    assert [m.version for m in listed["minilm"]] == ["1"] and [m.version for m in listed["other"]] == ["3"]
    for name, versions in listed.items():
        assert catalog.model_named(name) in versions


def test_sources_are_asked_in_order_and_every_name_is_listed():
    first = Fixed(Endpoints({"x": pipeline("x", "1")}, {"bad": "why"}))
    second = Fixed(Endpoints({"x": pipeline("x", "2"), "y": pipeline("y", "2")}, {"worse": "why not"}))
    catalog = Catalog(None, [first, second])
    assert catalog.resolve("x").version == "1" and catalog.resolve("y").version == "2"
    assert catalog.names() == ["x", "x", "y"]
    assert catalog.errors() == {"bad": "why", "worse": "why not"}
    with pytest.raises(NotFound, match="no endpoint 'z'; this server serves 'x', 'x', 'y'"):
        catalog.resolve("z")


def test_an_endpoint_being_loaded_is_a_503_to_retry_not_a_404(catalog):
    """Before (issue 42): for the seconds Triton loads an auto-updated endpoint's first version, it was 'no
    endpoint'."""
    with pytest.raises(Unavailable, match=r"endpoint 'coming' is being loaded \(version 4\)") as raised:
        catalog.resolve("coming")
    assert raised.value.status_code == 503 and raised.value.retry_after == LOADING_RETRY_AFTER_S
    assert "retry after 2 s" in raised.value.to_dict()["error"]["message"]
    with pytest.raises(Unavailable):
        catalog.model_named("coming")
    with pytest.raises(NotFound, match="no endpoint 'nope'"):  # only a name being loaded is told to wait
        catalog.resolve("nope")


def test_a_name_served_by_any_source_is_served_though_another_is_loading_it():
    loading = Fixed(Endpoints(loading={"x": ("2",), "y": ("5", "6")}))
    serving = Fixed(Endpoints({"x": pipeline("x", "1")}))
    catalog = Catalog(None, [loading, serving])
    assert catalog.resolve("x").version == "1"
    with pytest.raises(Unavailable, match=r"endpoint 'y' is being loaded \(version 5, 6\)"):
        catalog.resolve("y")
    assert catalog.names() == ["x"]
