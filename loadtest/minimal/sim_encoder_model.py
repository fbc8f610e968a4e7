"""The minimal ensemble's encoder on the simulated accelerator (`DEVICE=sim`): the batch padded to its longest
sequence as in encoder_model.py, then the project's simulated device (`services.common.sim_device`) in place of
ONNX Runtime, so the minimal ensemble and the project's stacks wait on the same device."""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from services.common.contract import Manifest
from services.common.sim_device import SimDevice

NAMES = ("input_ids", "attention_mask", "token_type_ids")


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        here = Path(args["model_repository"]) / args["model_version"]
        self.device = SimDevice.from_parameters(Manifest.load(here), params)

    def execute(self, requests):
        arrays = [[pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in NAMES] for r in requests]
        width = max(a[0].shape[1] for a in arrays)
        feeds = {
            name: np.concatenate([np.pad(a[k], ((0, 0), (0, width - a[k].shape[1]))) for a in arrays])
            for k, name in enumerate(NAMES)
        }
        output = self.device.run(feeds)
        responses, start = [], 0
        for a in arrays:
            rows = a[0].shape[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output[start : start + rows])]))
            start += rows
        return responses
