"""Triton Python backend: the exported ONNX model on ONNX Runtime (the `local` rendering; the `container` one uses
Triton's native onnxruntime backend instead), or, with the config parameter `device: sim`, the simulated accelerator
(`services.common.sim_device`) in its place.

Requests of a dynamic batch may have different sequence lengths (ragged batching): they are padded to the longest
and run as one call, then split back, one response per request.
"""

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

from services.common.contract import Manifest
from services.common.onnx_runner import OnnxModel
from services.common.sim_device import SimDevice
from services.triton.batching import merge_padded, split_rows


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        here = Path(args["model_repository"]) / args["model_version"]
        manifest = Manifest.load(here)
        if params.get("device") == "sim":
            self.model = SimDevice.from_parameters(manifest, params)
        else:
            threads = int(params.get("intra_op_threads", "1"))
            spin = params.get("spin", "false") == "true"
            device = "cuda" if params.get("device") == "cuda" else "cpu"
            self.model = OnnxModel(here, manifest, threads=threads, spin=spin, device=device)
        self.input_names = [i["name"] for i in config["input"]]
        self.output_name = config["output"][0]["name"]

    def execute(self, requests):
        feeds = []
        for request in requests:
            feeds.append(
                {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.input_names}
            )
        try:
            merged, rows = merge_padded(feeds)
            outputs = split_rows(self.model.run(merged), rows)
        except Exception as exc:  # one bad batch fails its requests, never the stub
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))) for _ in requests]
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output_name, out)]) for out in outputs]
