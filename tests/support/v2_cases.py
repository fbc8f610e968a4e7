"""Open Inference Protocol (v2) request bodies for the edge's tests: builders, and the malformed requests of issue
21 (each was a 500, or accepted) with the field a 4xx must name. Bodies are (raw bytes, the
Inference-Header-Content-Length header or None), as a client sends them."""

from __future__ import annotations

import struct

import orjson

Body = tuple[bytes, str | None]


def tensor(data=None, shape=None, **fields) -> dict:
    shape = shape if shape is not None else [len(data), 1]
    values = {"data": data} if data is not None else {}
    return {"name": "TEXT", "datatype": "BYTES", "shape": shape, **values, **fields}


def as_json(*inputs, **top) -> Body:
    return orjson.dumps({"inputs": list(inputs), **top}), None


def as_binary(size, blob: bytes, shape=(1, 1)) -> Body:
    """What tritonclient sends with binary_data=True: the JSON header, then the raw tensor."""
    header = orjson.dumps({"inputs": [tensor(shape=list(shape), parameters={"binary_data_size": size})]})
    return header + blob, str(len(header))


def with_tail(body: Body, tail: bytes) -> Body:
    return body[0] + tail, str(len(body[0]))


def deep(levels: int):
    value = "a"
    for _ in range(levels):
        value = [value]
    return value


ISSUE_21 = {
    "shape of a string": (as_json(tensor(["x"], shape=["a"])), "inputs.0.shape.0"),
    "shape of null": (as_json(tensor(["x"], shape=[None])), "inputs.0.shape.0"),
    "shape [-1, -1]": (as_json(tensor(["x"], shape=[-1, -1])), "inputs.0.shape.0"),
    "shape [] (no batch dimension)": (as_json(tensor(["x"], shape=[])), "inputs.0.shape"),
    "shape [1.5]": (as_json(tensor(["x"], shape=[1.5])), "inputs.0.shape.0"),
    "shape [true]": (as_json(tensor(["x"], shape=[True])), "inputs.0.shape.0"),
    "ragged data": (as_json(tensor([["a"], ["b", "c"]], shape=[2, 1])), "inputs.0.data.1"),
    "data nested deeper than 32": (as_json(tensor([deep(40)], shape=[1, 1])), "inputs.0.data.0.0"),
    "empty tensor": (as_json(tensor([], shape=[0])), "inputs.0.shape.0"),
    "parameters a list": (as_json(tensor(["x"]), parameters=[1]), "parameters"),
    "outputs a string": (as_json(tensor(["x"]), outputs="x"), "outputs"),
    "outputs of a number": (as_json(tensor(["x"]), outputs=[1]), "outputs.0"),
    "binary tensor of 2 bytes": (as_binary(2, b"\x05\x00"), "inputs.0"),
    "binary tensor of 5 bytes": (as_binary(5, b"\x05\x00\x00\x00h"), "inputs.0"),
    "binary length prefix 0xFFFFFFF0": (as_binary(5, struct.pack("<I", 0xFFFFFFF0) + b"h"), "inputs.0"),
    "binary bytes not UTF-8": (as_binary(5, b"\x01\x00\x00\x00\xff"), "inputs.0"),
    "zero-size binary tensor": (as_binary(0, b"", shape=(0, 1)), "inputs.0.shape.0"),
}
"""The 17 malformed requests issue 21 lists: case -> (body, the field its 4xx names)."""
