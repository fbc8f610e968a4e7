"""The minimal ensemble's encoder: the batch padded to its longest sequence, one ONNX Runtime call (2 threads that
do not spin between calls, as in the project's encoder: spinning threads take the cores the tokenizer and Triton's
front end need, docs/decisions/cpu-budget.md)."""

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

NAMES = ("input_ids", "attention_mask", "token_type_ids")


class TritonPythonModel:
    def initialize(self, args):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = f"{args['model_repository']}/{args['model_version']}/model.onnx"
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def execute(self, requests):
        arrays = [[pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in NAMES] for r in requests]
        width = max(a[0].shape[1] for a in arrays)
        feeds = {
            name: np.concatenate([np.pad(a[k], ((0, 0), (0, width - a[k].shape[1]))) for a in arrays])
            for k, name in enumerate(NAMES)
            if name in self.inputs
        }
        output = self.session.run(None, feeds)[0]
        responses, start = [], 0
        for a in arrays:
            rows = a[0].shape[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output[start : start + rows])]))
            start += rows
        return responses
