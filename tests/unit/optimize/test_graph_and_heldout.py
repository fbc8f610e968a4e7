"""The variant's parts that need no model: which variants this machine can build, the GELU-fed MatMuls found in a
small graph, the recipe's record, the held-out set, and NAME:VERSION."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from services.common.errors import ConfigurationError, InvalidInput
from services.optimize import graph
from services.optimize.graph import Recipe, after_gelu, check_variant
from services.optimize.heldout import HELDOUT, heldout_texts, labelled_rows
from services.optimize.registered import parse_version


def test_int8_is_built_anywhere():
    check_variant("int8")


def test_an_unknown_variant_is_refused_naming_the_known_ones():
    with pytest.raises(ConfigurationError, match="one of int8, fp16, not 'int4'"):
        check_variant("int4")


def test_fp16_without_a_cuda_provider_is_refused_naming_what_is_missing(monkeypatch):
    monkeypatch.setattr("onnxruntime.get_available_providers", lambda: ["CPUExecutionProvider"])
    monkeypatch.setattr(graph, "gpu_present", lambda: True)
    with pytest.raises(ConfigurationError) as refused:
        check_variant("fp16")
    message = str(refused.value)
    assert "CUDAExecutionProvider" in message and "onnxruntime-gpu" in message and "--variant int8" in message


def test_fp16_is_accepted_where_onnx_runtime_has_its_cuda_provider(monkeypatch):
    monkeypatch.setattr(
        "onnxruntime.get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    monkeypatch.setattr(graph, "gpu_present", lambda: True)
    assert graph.gpu_missing() is None
    check_variant("fp16")


def test_after_gelu_finds_the_matmuls_a_gelu_feeds(tmp_path):
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.0] * 16)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["up"], name="up_proj"),
        helper.make_node("BiasGelu", ["up", "b"], ["act"], name="gelu", domain="com.microsoft"),
        helper.make_node("MatMul", ["act", "w"], ["down"], name="down_proj"),
        helper.make_node("MatMul", ["down", "w"], ["y"], name="head"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
            initializer=[weight, helper.make_tensor("b", TensorProto.FLOAT, [4], [0.0] * 4)],
        )
    )
    onnx.save(model, tmp_path / "m.onnx")
    assert after_gelu(tmp_path / "m.onnx") == ["down_proj"]


def test_the_recipe_records_the_nodes_kept_in_fp32():
    described = Recipe("int8").describe(["a", "b"])
    assert described == {
        "variant": "int8",
        "op_types": "MatMul",
        "per_channel": "true",
        "kept_fp32": "2",
        "kept_fp32_nodes": "a,b",
    }
    assert Recipe("fp16").describe([]) == {"variant": "fp16"}


def test_the_heldout_set_ships_over_a_thousand_distinct_texts_with_its_source():
    texts = heldout_texts()
    assert len(texts) >= 1000 and len(set(texts)) == len(texts)
    assert "standard library" in HELDOUT.read_text().splitlines()[0]
    assert not any(text.startswith("#") for text in texts)
    assert len({len(text.split()) for text in texts}) > 20  # varied lengths, not one sentence repeated


@pytest.mark.parametrize("spec", ["sentiment", "sentiment:", ":2", "sentiment:two"])
def test_a_registered_version_is_name_colon_number(spec):
    with pytest.raises(InvalidInput, match="NAME:VERSION"):
        parse_version(spec)


def test_parse_version_splits_at_the_last_colon():
    assert parse_version("team:sentiment:12") == ("team:sentiment", "12")


def test_only_the_training_example_s_labels_get_its_held_out_rows():
    rows = labelled_rows(["negative", "positive"])
    assert len(rows) == 80 and {label for _, label in rows} == {0, 1}
    assert labelled_rows(["spam", "ham"]) is None and labelled_rows(None) is None
