"""The held-out texts a variant is measured on: 1,200 English sentences from the Python standard library's
docstrings, shipped in `data/heldout.txt` (source and licence in its header; how it was written: `heldout_source`)."""

from __future__ import annotations

from pathlib import Path

HELDOUT = Path(__file__).resolve().parent / "data" / "heldout.txt"


def heldout_texts(path: Path = HELDOUT) -> list[str]:
    """The texts of `path`, one a line; lines starting with `#` are its header."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]
