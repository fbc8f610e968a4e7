"""The request examples an app's OpenAPI document shows (what the HTTP API reference renders), as requests to send:
each JSON body example of each operation, with its path parameters filled from their documented examples."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    method: str
    template: str
    path: str
    name: str
    body: object


def parameter_example(parameter: dict) -> str | None:
    """A path parameter's documented example (OpenAPI's `example`, `examples`, or its schema's)."""
    for holder in (parameter, parameter.get("schema", {})):
        if "example" in holder:
            return str(holder["example"])
        found = holder.get("examples")
        if isinstance(found, list) and found:
            return str(found[0])
        if isinstance(found, dict) and found:
            return str(next(iter(found.values()))["value"])
    return None


def documented_examples(document: dict, fill: dict[str, str]) -> list[Example]:
    """Every JSON request body example of `document`; a path parameter without an example of its own takes its value
    from `fill` (the state the test prepared for it)."""
    found = []
    for template, operations in document["paths"].items():
        for method, operation in operations.items():
            media = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            examples = media.get("examples", {})
            if not examples and "example" in media:
                examples = {"example": {"value": media["example"]}}
            values = {
                p["name"]: parameter_example(p) or fill[p["name"]]
                for p in operation.get("parameters", [])
                if p["in"] == "path"
            }
            path = re.sub(r"\{(\w+)\}", lambda m, v=values: v[m.group(1)], template)
            for name, example in examples.items():
                found.append(Example(method.upper(), template, path, name, example["value"]))
    return found


def request_bodies(document: dict) -> list[tuple[str, str]]:
    """(method, path) of every operation that takes a JSON request body."""
    return [
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    ]
