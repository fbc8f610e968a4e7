"""The export's pass mark against PyTorch, and the tiny checkpoint's tokenizer (the part that needs no torch)."""

from __future__ import annotations

import math

import pytest

from services.common.errors import ModelBuildError
from services.modelbuild import validation
from services.modelbuild.tiny import tiny_tokenizer


@pytest.mark.parametrize("diff", [0.0, validation.TOLERANCE])
def test_a_difference_within_the_tolerance_passes(diff):
    validation.check("m", diff)


@pytest.mark.parametrize("diff", [validation.TOLERANCE * 2, math.inf, math.nan])
def test_a_larger_or_undefined_difference_fails_the_export(diff):
    with pytest.raises(ModelBuildError, match="ONNX export of m does not match PyTorch"):
        validation.check("m", diff)


def test_the_validation_texts_include_one_past_the_default_models_maximum_length():
    # every word is at least one token: 400 words are past all-MiniLM-L6-v2's 256 tokens, so truncation is checked
    assert max(len(text.split()) for text in validation.VALIDATION_TEXTS) > 256


def test_the_tiny_tokenizer_is_a_bert_wordpiece_tokenizer():
    tokenizer = tiny_tokenizer()
    assert tokenizer.encode("Hello World").tokens == ["[CLS]", "hello", "world", "[SEP]"]
    assert tokenizer.encode("dogs").tokens == ["[CLS]", "dog", "##s", "[SEP]"]
    pair = tokenizer.encode("a", "b")
    assert pair.type_ids == [0, 0, 0, 1, 1]
    assert tokenizer.encode("€").tokens == ["[CLS]", "[UNK]", "[SEP]"]
