"""The minimal ensemble's tokenizer: every request of the batch in one `encode_batch`, padded to the longest."""

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        path = f"{args['model_repository']}/{args['model_version']}/tokenizer.json"
        self.tokenizer = Tokenizer.from_file(path)
        self.tokenizer.enable_truncation(256)
        self.tokenizer.enable_padding()

    def execute(self, requests):
        texts, counts = [], []
        for request in requests:
            column = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            texts += [t.decode() for t in column]
            counts.append(len(column))
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        responses, start = [], 0
        for count in counts:
            rows = slice(start, start + count)
            start += count
            tensors = [
                pb_utils.Tensor("input_ids", ids[rows]),
                pb_utils.Tensor("attention_mask", mask[rows]),
                pb_utils.Tensor("token_type_ids", types[rows]),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
