"""`GET /v1/models`: a card for exactly the names `POST /v1/embeddings` accepts, dated by the versions' builds."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from services.api.endpoint import SingleModelEndpoint
from services.api.routes import _check_embeddings, model_cards
from services.common.contract import Manifest
from services.common.errors import InvalidInput
from services.common.schemas import EmbeddingsRequest
from tests.support.models import unit_model_dir
from tests.unit.api.fakes import make_dataplane, serve_also


def built_at(manifest: Manifest, created_at: str) -> Manifest:
    return manifest.model_copy(update={"build": manifest.build.model_copy(update={"created_at": created_at})})


@pytest.fixture
def catalog(tmp_path):
    """The fakes' endpoints ('minilm', 'other', the pipeline 'custom'), plus a classifier endpoint 'sentiment'."""
    catalog = make_dataplane(tmp_path).catalog
    builtin = catalog.builtin.model
    classifier = Manifest.load(unit_model_dir(tmp_path / "c", "classification"))
    sentiment = SingleModelEndpoint(dataclasses.replace(builtin, endpoint="sentiment", manifest=classifier))
    serve_also(catalog, sentiment)
    return catalog


def test_every_listed_model_is_one_v1_embeddings_accepts_and_no_other(catalog):
    cards = model_cards(catalog)
    assert [card.id for card in cards] == ["unit-embedding", "minilm", "other"]
    assert {card.object for card in cards} == {"model"} and {card.owned_by for card in cards} == {"transformer-serving"}
    for card in cards:  # what /v1/embeddings checks before it runs a model
        _check_embeddings(catalog.model_named(card.id), EmbeddingsRequest(input="a", model=card.id))
    with pytest.raises(InvalidInput, match="classifier"):
        _check_embeddings(catalog.model_named("sentiment"), EmbeddingsRequest(input="a", model="sentiment"))


def test_created_is_when_the_version_was_built_and_zero_when_that_cannot_be_read(catalog):
    builtin = catalog.builtin.model
    catalog.builtin.model = dataclasses.replace(
        builtin, manifest=built_at(builtin.manifest, "2024-05-01T12:00:00+00:00")
    )
    other = catalog.model_for("other")
    serve_also(catalog, SingleModelEndpoint(dataclasses.replace(other, manifest=built_at(other.manifest, "yesterday"))))
    created = {card.id: card.created for card in model_cards(catalog)}
    expected = int(dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC).timestamp())
    assert created == {"unit-embedding": expected, "minilm": expected, "other": 0}
