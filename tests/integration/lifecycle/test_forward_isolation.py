"""The controller's forward pass over an untrusted version runs in a child process with a time limit
(`services.controller.forward`): a graph that never ends is cut off and named, not a frozen loop."""

from __future__ import annotations

import shutil
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from services.common.contract import MODEL_FILE, Manifest
from services.controller.forward import forward, isolated_forward


def endless(model_dir, out):
    """A copy of `model_dir` whose output also waits for a Loop of 10^12 empty steps."""
    shutil.copytree(model_dir, out)
    model = onnx.load(str(out / MODEL_FILE))
    graph, output = model.graph, model.graph.output[0].name
    scalar = [("i", TensorProto.INT64), ("go", TensorProto.BOOL), ("carried", TensorProto.FLOAT)]
    body = helper.make_graph(
        [helper.make_node("Identity", ["go"], ["go_on"]), helper.make_node("Identity", ["carried"], ["kept"])],
        "spin",
        [helper.make_tensor_value_info(name, kind, []) for name, kind in scalar],
        [
            helper.make_tensor_value_info("go_on", TensorProto.BOOL, []),
            helper.make_tensor_value_info("kept", TensorProto.FLOAT, []),
        ],
    )
    graph.initializer.extend(
        [
            helper.make_tensor("steps", TensorProto.INT64, [], [10**12]),
            helper.make_tensor("start", TensorProto.BOOL, [], [True]),
            helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        ]
    )
    for node in graph.node:
        node.output[:] = [name + "_before" if name == output else name for name in node.output]
    graph.node.extend(
        [
            helper.make_node("Loop", ["steps", "start", "zero"], ["spun"], body=body),
            helper.make_node("Add", [output + "_before", "spun"], [output]),
        ]
    )
    onnx.save(model, str(out / MODEL_FILE))
    return out


def test_the_forward_pass_in_its_child_answers_as_in_process(tiny_model):
    manifest = Manifest.load(tiny_model)
    np.testing.assert_allclose(isolated_forward(tiny_model, manifest, timeout=120), forward(tiny_model, manifest))


def test_a_graph_that_never_ends_is_cut_off_at_the_limit_and_named(tiny_model, tmp_path):
    slow = endless(tiny_model, tmp_path / "endless")
    started = time.monotonic()
    with pytest.raises(ValueError, match="did not finish in 3 s"):
        isolated_forward(slow, Manifest.load(slow), timeout=3)
    assert time.monotonic() - started < 30, "the child is killed at the limit, not waited for"


def test_a_model_file_onnx_runtime_cannot_load_fails_with_its_reason(tiny_model, tmp_path):
    broken = shutil.copytree(tiny_model, tmp_path / "broken")
    (broken / MODEL_FILE).write_bytes(b"not an onnx file")
    with pytest.raises(ValueError, match="the forward pass on the warm-up texts failed: .*"):
        isolated_forward(broken, Manifest.load(broken), timeout=120)
