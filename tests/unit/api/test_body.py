import pytest

from services.api.body import validate
from services.common.errors import InvalidInput
from services.common.schemas import EmbeddingsRequest, ServeRequest


def test_serve_request_takes_text_or_texts():
    assert validate(ServeRequest, {"text": "a"}).batch == ["a"]
    assert validate(ServeRequest, {"texts": ["a", "b"]}).batch == ["a", "b"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, None),
        ({"text": "a", "texts": ["b"]}, None),
        ({"text": 3}, "text"),
        ({"texts": []}, "texts"),
        ({"texts": ["a", 1]}, "texts.1"),
        ({"text": "a", "truncate": "yes"}, "truncate"),
    ],
)
def test_serve_request_errors_name_the_field(body, field):
    with pytest.raises(InvalidInput) as info:
        validate(ServeRequest, body)
    assert info.value.param == field
    assert info.value.status_code == 422
    if field is None:
        assert '"text"' in info.value.message and '"texts"' in info.value.message


def test_body_must_be_an_object():
    with pytest.raises(InvalidInput, match="must be an object"):
        validate(ServeRequest, ["a"])


def test_openai_request():
    assert validate(EmbeddingsRequest, {"input": "a", "model": "m"}).batch == ["a"]
    with pytest.raises(InvalidInput) as info:
        validate(EmbeddingsRequest, {"input": []})
    assert "non-empty" in info.value.message
    with pytest.raises(InvalidInput) as info:
        validate(EmbeddingsRequest, {"input": [[1, 2, 3]]})
    assert info.value.param.startswith("input")
