"""The held-out texts a variant is measured on: 1,200 English sentences from the Python standard library's
docstrings, shipped in `data/heldout.txt` (source and licence in its header; how it was written: `heldout_source`);
and, for a classifier with `serving train`'s labels, that example's held-out rows, which its accuracy is scored on."""

from __future__ import annotations

from pathlib import Path

HELDOUT = Path(__file__).resolve().parent / "data" / "heldout.txt"


def heldout_texts(path: Path = HELDOUT) -> list[str]:
    """The texts of `path`, one a line; lines starting with `#` are its header."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def labelled_rows(labels: list[str] | None) -> list[tuple[str, int]] | None:
    """The held-out rows of `serving train`'s data set (the 20% its evaluate step scores) as (text, label index), for
    a classifier with that example's labels; None for any other model."""
    from services.registry.train import DATA, LABELS, read_rows, split

    if labels != LABELS:
        return None
    return split(read_rows(DATA), 0.8, seed=0)[1]
