"""How `data/heldout.txt` was written (once; the file is committed): English sentences from the docstrings of the
Python standard library of the interpreter that runs this (Python Software Foundation License), one per line.

A sentence is kept when it has 6 to 40 words, starts with a capital letter, ends with a full stop, and holds no code
(no brackets, `=`, `>>>`, underscores, backquotes); duplicates go. 1,200 of them are drawn with a fixed seed, so a
rerun on the same Python and platform (the same modules importable) writes the same file:
`python -m services.optimize.heldout_source > FILE`.
"""

from __future__ import annotations

import importlib
import inspect
import random
import re
import sys
import warnings

COUNT = 1200
SEED = 39
MODULES = sorted(
    name
    for name in sys.stdlib_module_names
    if not name.startswith("_") and name not in {"antigravity", "this", "idlelib", "turtledemo", "tkinter"}
)
CODE = re.compile(r"[()\[\]{}=<>_`*#@$%|\\/]|\.\.\.|https?:")
SENTENCE_END = re.compile(r"(?<=[a-z0-9])\.\s+(?=[A-Z])")


def docstrings() -> list[str]:
    """The docstring of every importable public stdlib module and of the callables each defines."""
    found: list[str] = []
    for name in MODULES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot import here is skipped
            continue
        members = [value for _, value in inspect.getmembers(module) if callable(value)]
        for item in [module, *(m for m in members if getattr(m, "__module__", None) == name)]:
            found.append(inspect.getdoc(item) or "")
    return found


def sentences(texts: list[str]) -> list[str]:
    """The prose sentences of `texts` that pass the rules above, once each, sorted."""
    kept: dict[str, None] = {}
    for text in texts:
        for paragraph in re.split(r"\n\s*\n", text):
            flat = " ".join(paragraph.split())
            for sentence in SENTENCE_END.split(flat):
                sentence = sentence.strip()
                if not sentence.endswith("."):
                    sentence += "."
                words = sentence.split()
                if (
                    6 <= len(words) <= 40
                    and sentence[0].isupper()
                    and sentence.isascii()
                    and not CODE.search(sentence)
                    and sentence[:-1].count(".") <= 1
                ):
                    kept.setdefault(sentence, None)
    return sorted(kept)


def main() -> None:
    pool = sentences(docstrings())
    chosen = random.Random(SEED).sample(pool, COUNT)
    print(f"# {COUNT} English sentences from the docstrings of the Python {sys.version.split()[0]} standard library")
    print("# (Python Software Foundation License); written by `python -m services.optimize.heldout_source`.")
    for sentence in chosen:
        print(sentence)


if __name__ == "__main__":
    main()
