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
