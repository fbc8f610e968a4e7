"""Which endpoint a name resolves to: the built-in one first, then the resolver's; a pipeline is no model; every
NotFound lists what is served."""

import pytest

from services.common.errors import NotFound
from tests.unit.api.fakes import make_dataplane


@pytest.fixture
def catalog(tmp_path):
    return make_dataplane(tmp_path).catalog


def test_endpoints_resolve_to_the_builtin_model_then_the_resolvers(catalog):
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
    declared = catalog.endpoints.metrics["custom"]
    assert catalog.find("custom") == (catalog.endpoints.pipeline, declared)
    assert catalog.find("minilm") == (catalog.builtin, None)
    catalog.endpoints.metrics["minilm"] = declared  # the endpoint file may declare statistics for any endpoint
    assert catalog.find("minilm")[1] is declared
    with pytest.raises(NotFound, match="no endpoint 'nope'"):
        catalog.find("nope")


def test_models_are_the_names_a_model_may_be_asked_for_with_their_live_versions(catalog):
    listed = catalog.models()
    assert list(listed) == ["unit-embedding", "minilm", "other"]  # the pipeline 'custom' names no model
    assert [m.version for m in listed["minilm"]] == ["1"] and [m.version for m in listed["other"]] == ["3"]
    for name, versions in listed.items():
        assert catalog.model_named(name) in versions
