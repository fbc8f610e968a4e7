import numpy as np
import pytest

from services.common.contract import TOKENIZER_FILE
from services.common.errors import InvalidInput
from services.common.tokenization import TextTokenizer, bucket_length, default_buckets
from tests.support.models import unit_model_dir


def test_bucket_length_picks_smallest_bucket_that_fits():
    buckets = [16, 32, 64, 128]
    assert bucket_length(1, buckets) == 16
    assert bucket_length(16, buckets) == 16
    assert bucket_length(17, buckets) == 32
    assert bucket_length(128, buckets) == 128
    assert bucket_length(200, buckets) == 200


def test_default_buckets_end_at_max_length():
    assert default_buckets(256) == [16, 32, 64, 128, 256]
    assert default_buckets(100) == [16, 32, 64, 100]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return unit_model_dir(tmp_path_factory.mktemp("unit-model"))


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return TextTokenizer(model_dir / TOKENIZER_FILE, max_length=64)


def test_pads_to_longest_text_not_to_a_fixed_length(tokenizer):
    batch = tokenizer.encode(["hello", "hello world the quick brown fox"])
    assert batch.token_counts == [3, 8], "[CLS] + words + [SEP]: every word is in the tiny vocabulary"
    assert batch.shape[1] == max(batch.token_counts) < 64
    assert batch.attention_mask.sum(axis=1).tolist() == batch.token_counts
    assert batch.input_ids.dtype == np.int64
    # padding positions hold the pad id and a zero mask
    short = batch.token_counts[0]
    assert (batch.input_ids[0, short:] == tokenizer.pad_id).all()
    assert batch.truncated == [False, False]


def test_pads_to_bucket_when_buckets_are_set(model_dir):
    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, max_length=64, buckets=[16, 32, 64])
    assert tokenizer.encode(["hello"]).shape == (1, 16)
    long_text = " ".join(["hello"] * 20)
    assert tokenizer.encode([long_text]).shape == (1, 32)


def test_truncates_long_text_and_says_so(tokenizer):
    batch = tokenizer.encode([" ".join(["hello"] * 200), "hello"])
    assert batch.shape[1] == 64
    assert batch.token_counts[0] == 64
    assert batch.truncated == [True, False]


def test_rejects_long_text_when_truncation_is_off(tokenizer):
    with pytest.raises(InvalidInput, match="longer than the model's maximum of 64 tokens"):
        tokenizer.encode(["hello", " ".join(["hello"] * 200)], truncate=False)


def test_single_and_batched_encoding_agree(tokenizer):
    texts = ["the cat", "a dog eats food"]
    batched = tokenizer.encode(texts)
    for row, text in enumerate(texts):
        single = tokenizer.encode([text])
        n = single.token_counts[0]
        assert batched.input_ids[row, :n].tolist() == single.input_ids[0].tolist()
