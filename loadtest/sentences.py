"""The English sentences shipped as load-test payloads (data/sentences.txt), and mixes of them."""

from __future__ import annotations

import random
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"


def sentences() -> list[str]:
    return [line.strip() for line in DATA.read_text().splitlines() if line.strip()]


def mixed(count: int, seed: int = 0) -> list[str]:
    """`count` texts drawn from every length in the file (short, medium and long sentences mixed)."""
    rng = random.Random(seed)
    pool = sentences()
    return [rng.choice(pool) for _ in range(count)]


def short(count: int, seed: int = 0) -> list[str]:
    """Short English sentences only (the original benchmark's kind of payload, ~10-20 tokens)."""
    rng = random.Random(seed)
    pool = [s for s in sentences() if len(s.split()) <= 12]
    return [rng.choice(pool) for _ in range(count)]


def long(count: int, seed: int = 0) -> list[str]:
    """Long sentences only (more than 20 words, ~30-60 tokens)."""
    rng = random.Random(seed)
    pool = [s for s in sentences() if len(s.split()) > 20]
    return [rng.choice(pool) for _ in range(count)]


MIXES = {"short": short, "mixed": mixed, "long": long}


def token_histogram(
    texts: list[str], tokenizer_file: Path, edges: tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128, 256)
) -> dict:
    """How many texts fall in each token-length bin (upper edges), with the tokenizer the model serves with."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
    bins: dict[str, int] = {}
    lower = 0
    for edge in edges:
        bins[f"{lower + 1}-{edge}"] = sum(lower < n <= edge for n in lengths)
        lower = edge
    bins[f">{lower}"] = sum(n > lower for n in lengths)
    return bins
