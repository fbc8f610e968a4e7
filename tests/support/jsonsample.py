"""JSON samples as the docs show them, where `...` stands for what is left out, and the check that a real answer has
the sample's shape (tests/e2e/test_docs.py)."""

from __future__ import annotations

import json

ELLIPSIS = object()


class SampleParser:
    """JSON with `...` allowed as a value, an array element, an object member and inside strings."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def parse(self):
        value = self.value()
        self.space()
        if self.pos != len(self.text):
            raise ValueError(f"trailing text in sample at {self.pos}: {self.text[self.pos :]!r}")
        return value

    def space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.space()
        return self.text.startswith(token, self.pos)

    def take(self, token: str) -> None:
        if not self.peek(token):
            raise ValueError(f"expected {token!r} at {self.pos} in {self.text!r}")
        self.pos += len(token)

    def value(self):
        if self.peek("..."):
            self.take("...")
            return ELLIPSIS
        if self.peek("{"):
            return self.members()
        if self.peek("["):
            return self.elements()
        decoder = json.JSONDecoder()
        value, end = decoder.raw_decode(self.text, self.pos)
        self.pos = end
        return value

    def members(self) -> dict:
        self.take("{")
        out: dict = {}
        while not self.peek("}"):
            if self.peek("..."):
                self.take("...")
                out[ELLIPSIS] = ELLIPSIS
            else:
                key = self.value()
                self.take(":")
                out[key] = self.value()
            if not self.peek("}"):
                self.take(",")
        self.take("}")
        return out

    def elements(self) -> list:
        self.take("[")
        out = []
        while not self.peek("]"):
            out.append(self.value())
            if not self.peek("]"):
                self.take(",")
        self.take("]")
        return out


def matches(sample, actual, path: str = "$") -> list[str]:
    """How `actual` differs from a sample as the docs show it: the same keys (more only where the sample has `...`),
    the same strings and booleans (a string with `...` in it stands for any string), numbers equal at the sample's
    precision, arrays with the sample's elements first (more only after a `...`)."""
    if sample is ELLIPSIS:
        return []
    if isinstance(sample, dict):
        if not isinstance(actual, dict):
            return [f"{path}: an object in the docs, {type(actual).__name__} here"]
        keys = {k for k in sample if k is not ELLIPSIS}
        errors = [f"{path}: no key {k!r}" for k in sorted(keys - actual.keys())]
        if ELLIPSIS not in sample and actual.keys() - keys:
            errors.append(f"{path}: keys not in the docs: {sorted(actual.keys() - keys)}")
        for key in sorted(keys & actual.keys()):
            errors += matches(sample[key], actual[key], f"{path}.{key}")
        return errors
    if isinstance(sample, list):
        if not isinstance(actual, list):
            return [f"{path}: an array in the docs, {type(actual).__name__} here"]
        shown = sample[: sample.index(ELLIPSIS)] if ELLIPSIS in sample else sample
        if len(actual) < len(shown) or (ELLIPSIS not in sample and len(actual) != len(sample)):
            return [f"{path}: {len(actual)} elements, the docs show {len(sample)}"]
        return [e for i, item in enumerate(shown) for e in matches(item, actual[i], f"{path}[{i}]")]
    if isinstance(sample, str) and "..." in sample:
        return [] if isinstance(actual, str) else [f"{path}: a string in the docs, {actual!r} here"]
    if isinstance(sample, float) and isinstance(actual, int | float) and not isinstance(actual, bool):
        decimals = len(repr(sample).split(".")[1]) if "." in repr(sample) and "e" not in repr(sample) else 6
        return [] if round(actual, decimals) == sample else [f"{path}: {actual} here, {sample} in the docs"]
    if sample != actual or type(sample) is not type(actual):
        return [f"{path}: {actual!r} here, {sample!r} in the docs"]
    return []
