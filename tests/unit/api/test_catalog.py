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
