"""Reading an Open Inference Protocol (KServe v2) inference request, all of it before anything runs.

The request is checked whole at the edge, the way `/serve` checks its body (`services.api.body`): the JSON header
against `V2InferenceRequest` (pydantic: shapes, datatypes, `parameters` and `outputs`), then the tensor's values
(JSON `data`, flat or nested as the shape says, or the binary extension's length-prefixed BYTES elements) against
its shape. Every refusal is a 4xx naming the field (`inputs.0.shape.0`, `inputs.0.data.1`, ...) and saying what to
send, so a malformed request never reaches the tokenizer, the coalescer or the backend: it gets the same answer
whether it comes alone or while other requests are being batched.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import NoReturn

import orjson
from pydantic import ValidationError

from services.api.body import validation_field
from services.common.errors import BadRequest, InvalidInput
from services.common.names import shown
from services.common.schemas import V2InferenceRequest, V2InputTensor

HEADER_LENGTH = "inference-header-content-length"
"""The binary extension's header: the JSON header's length in bytes; the tensors' raw bytes follow it."""
_PREFIX = struct.Struct("<I")  # each BYTES element: a 4-byte little-endian length, then that many bytes


@dataclass(frozen=True)
class Inference:
    request: V2InferenceRequest
    texts: list[str]


def parse_inference(raw: bytes, header_length: str | None, output: str) -> Inference:
    """The request in `raw` (a JSON header, and the binary tail when `header_length` is given) for a model whose
    one output is `output`: its texts, or InvalidInput / BadRequest naming what to fix."""
    header, blob = split_body(raw, header_length)
    return inference(validated(header), blob, output)


def inference(request: V2InferenceRequest, blob: bytes, output: str) -> Inference:
    """The checked request's texts (from its JSON `data` or from `blob`, the binary tensor data) for a model whose one
    output is `output`; InvalidInput naming what to fix. The gRPC edge (`services.api.v2_grpc`) calls it too."""
    for index, requested in enumerate(request.outputs or ()):
        if requested.name != output:
            field = f"outputs.{index}.name"
            raise InvalidInput(
                f"field '{field}': this model's output is '{output}', not {shown(requested.name)}", param=field
            )
    return Inference(request, tensor_texts(request.inputs[0], blob))


def split_body(raw: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    """The JSON header and the binary tail of an inference request."""
    if header_length is None:
        return raw, b""
    # ASCII digits only, and few of them: str.isdigit() accepts '²', which int() refuses, and int() refuses >4300 digits
    if (
        not (header_length.isascii() and header_length.isdigit())
        or len(header_length) > 19
        or int(header_length) > len(raw)
    ):
        raise BadRequest(
            f"Inference-Header-Content-Length '{header_length[:20]}' does not fit the body of {len(raw)} bytes: "
            "send the JSON header's length in bytes"
        )
    return raw[: int(header_length)], raw[int(header_length) :]


def validated(header: bytes) -> V2InferenceRequest:
    try:
        data = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"the inference request must be a JSON object, not {type(data).__name__}")
    return validated_request(data)


def validated_request(data: dict) -> V2InferenceRequest:
    """`data` (the JSON header, or what a gRPC request holds in its shape) as a request, or InvalidInput naming
    the field."""
    try:
        return V2InferenceRequest.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = validation_field(error)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "model_type":  # "... or instance of V2RequestParameters": a class the caller never sees
            message = "Input should be an object"
        if error["loc"][:1] == ("inputs",) and "shape" in error["loc"] and "[N" not in message:
            message += " (a shape is [N, 1] or [N], N >= 1 the number of texts)"
        raise InvalidInput(f"field '{field}': {message}" if field else message, param=field) from None


def tensor_texts(tensor: V2InputTensor, blob: bytes) -> list[str]:
    """The tensor's texts, from JSON `data` or from the binary tail, as many as its shape says."""
    size = tensor.parameters.binary_data_size if tensor.parameters else None
    if (size is None) == (tensor.data is None):
        raise InvalidInput(
            "field 'inputs.0': send the texts either as 'data' or in the binary tail with "
            "'parameters.binary_data_size' (and the Inference-Header-Content-Length header), exactly one of them",
            param="inputs.0",
        )
    if (size or 0) != len(blob):
        field = "inputs.0.parameters.binary_data_size"
        raise InvalidInput(
            f"field '{field}': {size or 0} bytes, but {len(blob)} follow the JSON header "
            "(Inference-Header-Content-Length): send the tensor's exact size in bytes",
            param=field,
        )
    if tensor.data is not None:
        return json_texts(tensor.data, tensor.shape)
    texts = binary_texts(blob)
    count = math.prod(tensor.shape)
    if len(texts) != count:
        raise InvalidInput(
            f"field 'inputs.0.shape': {tensor.shape} says {count} texts, the binary data holds {len(texts)}: send as "
            "many texts as the shape says",
            param="inputs.0.shape",
        )
    return texts


def json_texts(data: list, shape: list[int]) -> list[str]:
    """`data` as the shape's row-major strings: flat (N strings) or nested exactly as the shape (N lists of 1)."""
    count = math.prod(shape)
    nested = any(isinstance(value, list) for value in data)
    texts: list[str] = []
    problem = _walk(data, shape if nested else [count], "inputs.0.data", texts)
    if problem is not None:
        field, what = problem
        raise InvalidInput(
            f"field '{field}': {what}; send {count} string{'s' * (count != 1)} (shape {shape}), flat or nested as "
            "the shape says",
            param=field,
        )
    return texts


def _walk(value: object, dims: list[int], field: str, out: list[str]) -> tuple[str, str] | None:
    """Appends the strings of `value` to `out` if it has exactly the dimensions `dims` (at most two: the shape's
    rank bounds the depth, however deep the JSON is); else (the field, what is wrong there)."""
    if not dims:
        if isinstance(value, str):
            out.append(value)
            return None
        return field, f"{_kind(value)}, not a string"
    if not isinstance(value, list):
        return field, f"{_kind(value)}, not a list of {dims[0]}"
    if len(value) != dims[0]:
        return field, f"{len(value)} values where the shape says {dims[0]}"
    for index, item in enumerate(value):
        if (problem := _walk(item, dims[1:], f"{field}.{index}", out)) is not None:
            return problem
    return None


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", dict: "an object"}[type(value)]


def binary_texts(blob: bytes) -> list[str]:
    """The BYTES elements of the binary extension (each a 4-byte little-endian length, then its bytes) as UTF-8
    texts. tritonclient's `deserialize_bytes_tensor` trusts the lengths; this refuses a length that runs past the
    end (such as 0xFFFFFFF0), a tail too short for a length, and bytes that are not UTF-8."""
    texts: list[str] = []
    offset, end = 0, len(blob)
    while offset < end:
        where = f"field 'inputs.0': binary element {len(texts)} (at byte {offset})"
        if end - offset < _PREFIX.size:
            _bad_binary(f"{where} has {end - offset} bytes, too few for its 4-byte length")
        (length,) = _PREFIX.unpack_from(blob, offset)
        offset += _PREFIX.size
        if length > end - offset:
            _bad_binary(f"{where} says {length} bytes, but {end - offset} remain")
        try:
            texts.append(blob[offset : offset + length].decode("utf-8"))
        except UnicodeDecodeError as exc:
            _bad_binary(f"{where} is not UTF-8 (its byte {exc.start})")
        offset += length
    return texts


def _bad_binary(problem: str) -> NoReturn:
    raise InvalidInput(
        f"{problem}: send each text as a 4-byte little-endian length and then its UTF-8 bytes "
        "(tritonclient's serialize_byte_tensor)",
        param="inputs.0",
    )
