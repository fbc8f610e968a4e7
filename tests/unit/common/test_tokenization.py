import time

import numpy as np
import pytest
from tokenizers import Tokenizer

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


@pytest.mark.parametrize("with_long", [False, True])
def test_a_batch_gives_what_the_tokenizer_gives_each_text(tokenizer, model_dir, with_long):
    """A batch without a long text skips the offsets (encode_batch_fast); one with a long text computes them. Either
    way each row is the tokenizer's own encoding of its text, truncated at the model's length."""
    reference = Tokenizer.from_file(str(model_dir / TOKENIZER_FILE))
    reference.no_padding()
    reference.enable_truncation(max_length=64)
    texts = ["the cat", "a dog eats food", "hello " * 80, "", "中文 text"] + (long_texts(2000)[:2] if with_long else [])
    batch = tokenizer.encode(texts)
    for row, text in enumerate(texts):
        expected = reference.encode(text)
        n = len(expected.ids)
        assert batch.token_counts[row] == n, text[:40]
        assert batch.input_ids[row, :n].tolist() == expected.ids, text[:40]
        assert batch.token_type_ids[row, :n].tolist() == expected.type_ids, text[:40]
        assert batch.attention_mask[row].sum() == n, text[:40]
        assert batch.truncated[row] == bool(expected.overflowing), text[:40]
    assert batch.truncated[2], "80 words are over the 64 tokens the model reads"


def long_texts(n: int) -> list[str]:
    """Texts of about `n` characters that the prefix rule must get right: words, a word over WordPiece's 100
    characters near where the cut falls, no spaces at all, whitespace runs, CJK, punctuation only."""
    words = "the quick brown fox jumps over the lazy dog while the cat watches "
    return [
        (words * (n // len(words) + 1))[:n],
        "a " * 300 + "z" * n,
        "x" * n,
        " " * n + "hello world",
        ("y" * 150 + " ") * (n // 151),
        "中文" * (n // 2),
        "!?" * (n // 2),
        "hello " * 90 + "w" * 400 + " tail" * 100,
        # the 62nd word (the last the model reads) is 500 characters, one [UNK], and crosses the cut at 768: cut
        # there it would be 68 characters, which WordPiece splits into pieces instead
        ("a " * 61).ljust(700) + "w" * 500 + " tail" * 10,
    ]


@pytest.mark.parametrize("n", [600, 1000, 5000, 20_000])
def test_a_long_text_tokenized_from_its_prefix_gives_what_the_whole_text_gives(tokenizer, model_dir, n):
    whole = TextTokenizer(model_dir / TOKENIZER_FILE, max_length=64)
    whole.cut_at = None  # every text whole
    for text in long_texts(n):
        cut, full = tokenizer.encode([text]), whole.encode([text])
        assert cut.token_counts == full.token_counts and cut.truncated == full.truncated, text[:40]
        assert (cut.input_ids == full.input_ids).all(), text[:40]


def test_a_long_text_costs_the_prefix_not_the_whole_text(tokenizer, model_dir):
    whole = TextTokenizer(model_dir / TOKENIZER_FILE, max_length=64)
    whole.cut_at = None
    texts = long_texts(10_000)[:1] * 64  # 64 texts of 10k characters of words, as the attack in issue 21

    def best(encoder):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            encoder.encode(texts)
            times.append(time.perf_counter() - start)
        return min(times)

    cut, full = best(tokenizer), best(whole)
    print(f"64 texts of 10k characters: {full * 1000:.0f} ms whole, {cut * 1000:.0f} ms from their prefixes")
    assert cut < full / 3
