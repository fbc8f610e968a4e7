"""The Open Inference Protocol parser: JSON and binary tensors in, clear errors for what it cannot read."""

import numpy as np
import orjson
import pytest
from tritonclient.utils import serialize_byte_tensor

from services.api.v2 import split_body, texts_from_request, wants_binary
from services.common.errors import BadRequest, InvalidInput


def text_input(data, shape=None, datatype="BYTES", name="TEXT"):
    return {"inputs": [{"name": name, "datatype": datatype, "shape": shape or [len(data), 1], "data": data}]}


def test_json_tensor_of_strings():
    assert texts_from_request(text_input(["a b", "c"]), b"") == ["a b", "c"]
    nested = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2, 1], "data": [["x"], ["y"]]}]}
    assert texts_from_request(nested, b"") == ["x", "y"]


def test_binary_tensor_as_tritonclient_sends_it():
    blob = serialize_byte_tensor(np.array([b"hello", "h\u00e9".encode()], dtype=np.object_)).item()
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "TEXT", "datatype": "BYTES", "shape": [2, 1], "parameters": {"binary_data_size": len(blob)}}
            ]
        }
    )
    request, tail = split_body(header + blob, str(len(header)))
    assert tail == blob
    assert texts_from_request(request, tail) == ["hello", "h\u00e9"]


@pytest.mark.parametrize(
    ("request_body", "says"),
    [
        ({"inputs": []}, "non-empty list"),
        ({}, "non-empty list"),
        (text_input(["a"], name="INPUT_IDS"), "takes 'TEXT'"),
        (text_input(["a"], datatype="INT64"), "must be BYTES"),
        (text_input([1, 2]), "list of strings"),
        (text_input(["a", "b"], shape=[3, 1]), "does not match its 2 values"),
    ],
)
def test_requests_it_cannot_serve_name_the_problem(request_body, says):
    with pytest.raises(InvalidInput, match=says):
        texts_from_request(request_body, b"")


def test_header_length_must_fit_and_json_must_parse():
    with pytest.raises(BadRequest, match="does not fit"):
        split_body(b"{}", "99")
    with pytest.raises(BadRequest, match="does not fit"):
        split_body(b"{}", "-1")
    with pytest.raises(BadRequest, match="malformed JSON"):
        split_body(b"{nope", None)
    with pytest.raises(InvalidInput, match="JSON object"):
        split_body(b"[1]", None)


def test_binary_output_is_asked_per_output_or_for_all():
    assert wants_binary({"outputs": [{"name": "embedding", "parameters": {"binary_data": True}}]}, "embedding")
    assert not wants_binary({"outputs": [{"name": "embedding"}]}, "embedding")
    assert wants_binary({"parameters": {"binary_data_output": True}}, "embedding")
    assert not wants_binary({}, "embedding")


@pytest.mark.parametrize("size", ["12", -1, 1000, True])
def test_a_binary_size_that_does_not_fit_the_body_is_refused(size):
    request = {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "parameters": {"binary_data_size": size}}]
    }
    with pytest.raises(InvalidInput, match="binary_data_size"):
        texts_from_request(request, b"\x01\x00\x00\x00a")
