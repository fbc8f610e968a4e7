"""Triton Python backend: TEXT (BYTES) -> input_ids, attention_mask, token_type_ids (INT64).

Thin: the tokenizer and its padding rules live in services.common.tokenization. Every request of the batch Triton
hands over is tokenized in one call; each gets exactly one response, a per-request error for bad input.
"""

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

from services.common.errors import ServingError
from services.common.tokenization import TextTokenizer
from services.triton.batching import decode_texts, split_rows


def _error(message):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        here = Path(args["model_repository"]) / args["model_version"]
        buckets = [int(b) for b in params.get("buckets", "").split(",") if b]
        self.tokenizer = TextTokenizer(here / params["tokenizer_file"], int(params["max_length"]), buckets or None)
        self.truncate = params.get("truncate", "true") == "true"
        self.output_names = [o["name"] for o in config["output"]]

    def execute(self, requests):
        responses = [None] * len(requests)
        texts, owners, rows = [], [], []
        for index, request in enumerate(requests):
            try:
                batch = decode_texts(pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy())
            except UnicodeDecodeError as exc:
                responses[index] = _error(f"TEXT is not UTF-8: {exc}")
                continue
            texts.extend(batch)
            owners.append(index)
            rows.append(len(batch))
        if texts:
            try:
                encoded = self.tokenizer.encode(texts, truncate=self.truncate)
            except ServingError as exc:
                for index in owners:
                    responses[index] = _error(exc.message)
                return responses
            tensors = encoded.tensors(self.output_names)
            per_name = {name: split_rows(array, rows) for name, array in tensors.items()}
            for slot, index in enumerate(owners):
                outputs = [pb_utils.Tensor(name, per_name[name][slot]) for name in self.output_names]
                responses[index] = pb_utils.InferenceResponse(output_tensors=outputs)
        return responses
