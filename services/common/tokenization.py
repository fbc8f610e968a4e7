"""Text -> padded tensors with HF `tokenizers`, configured from the manifest rather than from tokenizer.json.

The saved tokenizer.json of many checkpoints pads every text to a fixed length; serving short texts that way costs up
to 10x the compute. Here padding is to the longest text of the batch, optionally rounded up to a length bucket so
that a server that batches only equal shapes (Triton) can group requests.

A text far longer than the model reads is cut before tokenizing. `tokenizers` tokenizes the whole text and then
truncates (and keeps the rest as overflowing pieces), which costs CPU and memory for tokens the model never reads
(docs/decisions/request-bounds.md). So a text
over `max_length * CHARS_PER_TOKEN + MARGIN` characters is tokenized from that prefix when the answer is provably
the same: the prefix already overflows, and its last kept token ends at least `MARGIN` characters before the cut.
For WordPiece (the BERT family) that is exact: the words in between are whole in both, and a word crossing the cut
that held a kept token would be over `MARGIN` > `max_input_chars_per_word` characters, one [UNK] ending at the cut,
so the check fails. Otherwise, and for other tokenizer models, the whole text is tokenized.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from services.common.errors import InvalidInput

# `encode_batch` spreads a batch over a thread pool unless told not to. A server already keeps every core busy with
# concurrent requests, so the pool only costs CPU (docs/decisions/triton-defaults.md). A value the user set wins.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
CHARS_PER_TOKEN = 8
"""Characters a token may span on average in the prefix of a long text (English WordPiece averages ~4.5 with the
space); a prefix with fewer tokens than the model reads falls back to the whole text."""
MARGIN = 256
"""Characters between the last kept token and the cut, over any word the tokenizer would split (WordPiece turns a
word over `max_input_chars_per_word`, 100 for BERT, into one [UNK])."""


@dataclass(frozen=True)
class EncodedBatch:
    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    token_counts: list[int]
    truncated: list[bool]

    def tensors(self, names: list[str]) -> dict[str, np.ndarray]:
        """The model inputs by name, in the order the contract lists them."""
        return {name: getattr(self, name) for name in names}

    @property
    def shape(self) -> tuple[int, int]:
        rows, length = self.input_ids.shape
        return rows, length

    def rows(self, start: int, stop: int) -> EncodedBatch:
        """Rows start..stop-1, at the batch's width (a bucketed width stays a bucket)."""
        return EncodedBatch(
            self.input_ids[start:stop],
            self.attention_mask[start:stop],
            self.token_type_ids[start:stop],
            self.token_counts[start:stop],
            self.truncated[start:stop],
        )


def bucket_length(length: int, buckets: list[int]) -> int:
    """The smallest bucket that holds `length` (buckets sorted ascending); the length itself past the last."""
    index = bisect.bisect_left(buckets, length)
    return buckets[index] if index < len(buckets) else length


def default_buckets(max_length: int) -> list[int]:
    """Powers of two from 16 up to the model's maximum length (which is always the last bucket)."""
    buckets = [16]
    while buckets[-1] * 2 < max_length:
        buckets.append(buckets[-1] * 2)
    return sorted(set(buckets + [max_length]))


class TextTokenizer:
    """Thread-safe for reads: `encode` keeps no per-call state on the instance."""

    def __init__(self, tokenizer_file: Path | str, max_length: int, buckets: list[int] | None = None):
        self.max_length = max_length
        self.buckets = sorted(buckets) if buckets else None
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_length)
        padding = self._tokenizer.token_to_id("[PAD]")
        self.pad_id = 0 if padding is None else padding
        model = self._tokenizer.model
        exact = isinstance(model, WordPiece) and model.max_input_chars_per_word < MARGIN
        self.cut_at = max_length * CHARS_PER_TOKEN + MARGIN if exact else None
        """Texts longer than this many characters are tokenized from their prefix (None: never)."""

    def encode(self, texts: list[str], *, truncate: bool = True) -> EncodedBatch:
        cut_at = self.cut_at
        long = [i for i, text in enumerate(texts) if len(text) > cut_at] if cut_at else ()
        if long:
            whole, texts = texts, list(texts)
            for i in long:
                texts[i] = texts[i][:cut_at]
        # encode_batch_fast leaves out the offsets, which only the check of a cut text below reads
        encodings = self._tokenizer.encode_batch(texts) if long else self._tokenizer.encode_batch_fast(texts)
        for i in long:
            encoding = encodings[i]
            if not encoding.overflowing or max(end for _, end in encoding.offsets) > (cut_at or 0) - MARGIN:
                encodings[i] = self._tokenizer.encode(whole[i])  # the prefix may not say: the whole text
        truncated = [bool(encoding.overflowing) for encoding in encodings]
        if not truncate and any(truncated):
            index = truncated.index(True)
            raise InvalidInput(
                f"text {index} is longer than the model's maximum of {self.max_length} tokens and truncation is off; "
                "shorten it or send truncate=true",
                param="texts" if len(texts) > 1 else "text",
            )
        counts = [len(encoding.ids) for encoding in encodings]
        longest = max(counts)
        width = bucket_length(longest, self.buckets) if self.buckets else longest
        batch = len(encodings)
        input_ids = np.full((batch, width), self.pad_id, dtype=np.int64)
        attention_mask = np.zeros((batch, width), dtype=np.int64)
        token_type_ids = np.zeros((batch, width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            n = counts[row]
            input_ids[row, :n] = encoding.ids
            attention_mask[row, :n] = 1
            token_type_ids[row, :n] = encoding.type_ids
        return EncodedBatch(input_ids, attention_mask, token_type_ids, counts, truncated)
