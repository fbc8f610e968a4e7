"""The Open Inference Protocol parser: JSON and binary tensors in, and for every malformed request a 4xx that names
the field, before anything runs (issue 21: these were 500s, or accepted)."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import serialize_byte_tensor

from services.api.v2_request import parse_inference, split_body
from services.common.errors import BadRequest, InvalidInput, ServingError
from services.common.schemas import V2InferenceRequest
from tests.support.v2_cases import ISSUE_21, Body, as_binary, as_json, tensor, with_tail

OUTPUT = "embedding"


def parse(body: Body):
    return parse_inference(body[0], body[1], OUTPUT)


MALFORMED = {
    **ISSUE_21,
    # datatype, name and shape product mismatches, and the binary tail's framing
    "datatype FP32": (as_json(tensor([1.0], datatype="FP32")), "inputs.0.datatype"),
    "numbers as BYTES": (as_json(tensor([1, 2])), "inputs.0.data.0"),
    "input not TEXT": (as_json(tensor(["a"], name="INPUT_IDS")), "inputs.0.name"),
    "two inputs": (as_json(tensor(["a"]), tensor(["b"])), "inputs"),
    "no inputs": (as_json(), "inputs"),
    "shape product over the data": (as_json(tensor(["a", "b"], shape=[3, 1])), "inputs.0.data"),
    "shape [2, 3]": (as_json(tensor(["a"] * 6, shape=[2, 3])), "inputs.0.shape"),
    "data nested against a flat shape": (as_json(tensor([["a"], ["b"]], shape=[2])), "inputs.0.data.0"),
    "zero-size binary tensor of shape [1, 1]": (as_binary(0, b""), "inputs.0.shape"),
    "binary size over the tail": (as_binary(1000, b"\x01\x00\x00\x00a"), "inputs.0.parameters.binary_data_size"),
    "binary size a string": (as_binary("12", b"\x01\x00\x00\x00a"), "inputs.0.parameters.binary_data_size"),
    "binary size negative": (as_binary(-1, b""), "inputs.0.parameters.binary_data_size"),
    "binary tail with JSON data": (with_tail(as_json(tensor(["a"])), b"xx"), "inputs.0.parameters.binary_data_size"),
    "both data and binary": (
        as_json(tensor(["a"], parameters={"binary_data_size": 0})),
        "inputs.0",
    ),
    "neither data nor binary": (as_json(tensor(shape=[1, 1])), "inputs.0"),
    "an output the model lacks": (as_json(tensor(["a"]), outputs=[{"name": "logits"}]), "outputs.0.name"),
    "binary_data not a boolean": (
        as_json(tensor(["a"]), outputs=[{"name": OUTPUT, "parameters": {"binary_data": "yes"}}]),
        "outputs.0.parameters.binary_data",
    ),
    "id a number": (as_json(tensor(["a"]), id=7), "id"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_request_is_a_4xx_naming_the_field(case):
    body, field = MALFORMED[case]
    with pytest.raises(ServingError) as raised:
        parse(body)
    error = raised.value
    assert 400 <= error.status_code < 500
    if field is not None:
        assert error.param == field, error.message
        assert field in error.message
    print(f"{case}: {error.status_code} {error.message}")


def test_json_tensors_flat_or_nested_as_the_shape_says():
    assert parse(as_json(tensor(["a b", "c"]))).texts == ["a b", "c"]
    assert parse(as_json(tensor([["x"], ["y"]], shape=[2, 1]))).texts == ["x", "y"]
    assert parse(as_json(tensor(["x", "y"], shape=[2]))).texts == ["x", "y"]


def test_binary_tensor_as_tritonclient_sends_it():
    blob = serialize_byte_tensor(np.array([b"hello", "h\u00e9".encode(), b""], dtype=np.object_)).item()
    inference = parse(as_binary(len(blob), blob, shape=(3, 1)))
    assert inference.texts == ["hello", "h\u00e9", ""]


def test_header_length_must_fit_and_json_must_parse():
    with pytest.raises(BadRequest, match="does not fit"):
        split_body(b"{}", "99")
    with pytest.raises(BadRequest, match="does not fit"):
        split_body(b"{}", "-1")
    for not_a_length in ("\u00b2", "9" * 5000):  # isdigit() but not int(): '²', and past int()'s 4300 digits
        with pytest.raises(BadRequest, match="does not fit"):
            split_body(b"{}", not_a_length)
    with pytest.raises(BadRequest, match="malformed JSON"):
        parse((b"{nope", None))
    with pytest.raises(InvalidInput, match="JSON object"):
        parse((b"[1]", None))


def test_binary_output_is_asked_per_output_or_for_all():
    def wants(**request) -> bool:
        return V2InferenceRequest.model_validate({"inputs": [tensor(["a"])], **request}).wants_binary(OUTPUT)

    assert wants(outputs=[{"name": OUTPUT, "parameters": {"binary_data": True}}])
    assert not wants(outputs=[{"name": OUTPUT}])
    assert wants(parameters={"binary_data_output": True})
    assert wants(outputs=[{"name": OUTPUT}], parameters={"binary_data_output": True})
    assert not wants(
        outputs=[{"name": OUTPUT, "parameters": {"binary_data": False}}], parameters={"binary_data_output": True}
    )
    assert not wants()


def test_parameters_triton_defines_beyond_these_are_accepted():
    body = as_json(tensor(["a"], parameters={"shared": 1}), parameters={"priority": 1, "timeout": 5}, id="r1")
    inference = parse(body)
    assert inference.texts == ["a"] and inference.request.id == "r1"
