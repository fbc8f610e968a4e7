"""The triton engine: tokenize in the gateway, run the model in Triton. The gateway runs

    load(model file) once, then per request: preprocess(body) -> Triton `encoder` -> postprocess(embedding)

sending what preprocess returns as the endpoint's declared inputs (`--input`, in order) and handing the declared
output (`--output`) to postprocess. The model is this project's sentence encoder (`make model` exports it to
build/model/ and `make up` serves it in Triton as `encoder`); the tokenizer it was exported with is the endpoint's
--model-file, so this class loads it in `load()`.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer


# the gateway looks for a class with exactly this name
class Preprocess:
    def __init__(self):
        # runs once per worker, never per request
        self.tokenizer = None

    def load(self, local_file_name: str) -> Any:
        # `local_file_name` is the endpoint's --model-file: build/model/tokenizer.json, beside the export's manifest,
        # which says how many tokens the encoder takes
        self.tokenizer = Tokenizer.from_file(local_file_name)
        manifest = json.loads((Path(local_file_name).parent / "manifest.json").read_text())
        self.tokenizer.enable_truncation(manifest["max_seq_length"])
        return None  # Triton serves the model: nothing for the gateway to keep

    def preprocess(self, body: dict, state: dict, collect_custom_statistics_fn=None) -> Any:
        text = body.get("text")
        if not isinstance(text, str):
            raise ValueError('send "text": a string')
        encoding = self.tokenizer.encode(text)
        state["tokens"] = len(encoding.ids)  # per-request data for postprocess
        # one array per declared input, in the order of the --input options: input_ids, attention_mask,
        # token_type_ids, each INT64 of shape [batch, tokens] (Triton's metadata for `encoder` lists them)
        return [np.array([ids], dtype=np.int64) for ids in (encoding.ids, encoding.attention_mask, encoding.type_ids)]

    def postprocess(self, data: Any, state: dict, collect_custom_statistics_fn=None) -> dict:
        # `data` is the declared output, `embedding`: one row of floats per text in the batch (here one)
        return dict(y=data[0].tolist(), tokens=state["tokens"])
