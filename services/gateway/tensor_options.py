"""The tensors `serving endpoints add` declares, in either of two forms that write the same endpoint file:

- this project's, one option per tensor: `--input input_ids:INT64:-1,-1 --input attention_mask:INT64:-1,-1`;
- clearml-serving's, one list per field: `--input-name input_ids attention_mask --input-type int64 int64
  --input-size "[-1, -1]" "[-1, -1]"` (a size is a JSON list; several plain numbers, `--input-size -1 784`, are the
  one shape of a single tensor, as clearml-serving reads them).

Dtypes are Triton names (INT64, FP32) or numpy names (int64, float32), and are stored as Triton names; a shape is the
whole shape, the batch axis first. Each problem is an InvalidInput naming the option and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pydantic import ValidationError

from services.common.contract import TRITON_NAMES, TensorSpec
from services.common.errors import InvalidInput


def _spec(option: str, name: str, dtype: str, shape: list[int], given: str) -> TensorSpec:
    try:
        return TensorSpec(name=name, dtype=dtype, shape=shape)
    except ValidationError as exc:
        raise InvalidInput(f"{option} {given}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None


def colon_spec(text: str, option: str = "--input") -> TensorSpec:
    """NAME:DTYPE:SHAPE, e.g. input_ids:INT64:-1,-1"""
    try:
        name, dtype, shape = text.split(":")
        dims = [int(d) for d in shape.split(",")]
    except ValueError:
        raise InvalidInput(f"{option} '{text}' is not NAME:DTYPE:SHAPE (e.g. input_ids:INT64:-1,-1)") from None
    return _spec(option, name, dtype, dims, text)


def sizes(values: list[str], option: str) -> list[list[int]]:
    """`--input-size` values: one JSON list per tensor, or plain numbers making up one tensor's shape."""
    parsed = []
    for value in values:
        try:
            item = json.loads(value)
        except ValueError:
            item = None
        if not (_is_int(item) or (isinstance(item, list) and all(_is_int(d) for d in item))):
            raise InvalidInput(f"{option} takes a JSON list of axis sizes per tensor, e.g. \"[-1, -1]\", not '{value}'")
        parsed.append(item)
    if all(_is_int(item) for item in parsed):
        return [parsed] if parsed else []
    if any(_is_int(item) for item in parsed):
        raise InvalidInput(f'{option}: give one JSON list per tensor ("[-1, -1]" "[-1, 2]"), not numbers and lists')
    return parsed


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def list_specs(direction: str, names: list[str], types: list[str], shapes: list[str]) -> list[TensorSpec]:
    """clearml-serving's form: the i-th name with the i-th type and the i-th size."""
    options = [f"--{direction}-{field}" for field in ("name", "type", "size")]
    dims = sizes(shapes, options[2])
    counts = dict(zip(options, (len(names), len(types), len(dims)), strict=True))
    if len(set(counts.values())) > 1:
        given = ", ".join(f"{option} {count}" for option, count in counts.items())
        raise InvalidInput(f"{given} values: give one name, one type and one size per {direction}")
    return [_spec(options[1], name, dtype, shape, dtype) for name, dtype, shape in zip(names, types, dims, strict=True)]


def declared(
    direction: str, specs: list[str], names: list[str], types: list[str], shapes: list[str]
) -> tuple[list[TensorSpec], bool]:
    """The tensors declared for `direction` ("input" or "output") in either form (not both), and whether the list
    form was used (a fix is then suggested in that form)."""
    listed = bool(names or types or shapes)
    if specs and listed:
        raise InvalidInput(
            f"declare {direction}s with --{direction} NAME:DTYPE:SHAPE or with --{direction}-name/--{direction}-type/"
            f"--{direction}-size, not both"
        )
    if listed:
        return list_specs(direction, names, types, shapes), True
    return [colon_spec(text, f"--{direction}") for text in specs], False


def fix(listed: set[str]) -> Callable[[str, TensorSpec], str]:
    """How a message names the option that declares a tensor as Triton has it, in the form the user typed (`listed`:
    the directions, "input" and "output", given in clearml-serving's list form)."""

    def option(direction: str, spec: TensorSpec) -> str:
        if direction in listed:
            numpy_name = next((n for n, t in TRITON_NAMES.items() if t == spec.dtype), spec.dtype.lower())
            size = json.dumps(spec.shape)
            return f"--{direction}-type {numpy_name} and --{direction}-size '{size}' for '{spec.name}'"
        return f"--{direction} {spec.name}:{spec.dtype}:{','.join(str(d) for d in spec.shape)}"

    return option
