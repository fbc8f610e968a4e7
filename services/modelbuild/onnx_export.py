"""PyTorch -> ONNX: the checkpoint wrapped with the pooling and normalisation its configs ask for, traced into one
ONNX graph, and its fast tokenizer saved beside it without padding or truncation (servers set both from the
manifest at run time)."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from services.common.contract import TOKENIZER_FILE
from services.common.tokenization import TextTokenizer
from services.modelbuild.checkpoint import Checkpoint
from services.modelbuild.fingerprint import OPSET
from services.modelbuild.validation import VALIDATION_TEXTS

if TYPE_CHECKING:
    import torch


def load_torch_model(checkpoint: Checkpoint) -> tuple[torch.nn.Module, list[str]]:
    """The module to export and the input names it takes (`token_type_ids` only when the model accepts them)."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    loader = AutoModelForSequenceClassification if checkpoint.task == "classification" else AutoModel
    model = loader.from_pretrained(str(checkpoint.path), local_files_only=True).eval()
    accepts_token_types = "token_type_ids" in inspect.signature(model.forward).parameters

    class Exportable(torch.nn.Module):
        """The checkpoint plus the pooling and normalisation its configs ask for, as one graph."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if accepts_token_types:
                kwargs["token_type_ids"] = token_type_ids
            out = self.model(**kwargs)
            if checkpoint.task == "classification":
                return out.logits
            return pool(out[0], attention_mask, checkpoint)

    input_names = ["input_ids", "attention_mask"] + (["token_type_ids"] if accepts_token_types else [])
    return Exportable().eval(), input_names


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, checkpoint: Checkpoint) -> torch.Tensor:
    """One vector per text from the token vectors: CLS, masked max or masked mean, then L2-normalised if asked."""
    import torch

    if checkpoint.pooling == "cls":
        pooled = hidden[:, 0]
    elif checkpoint.pooling == "max":
        masked = hidden.masked_fill(attention_mask.unsqueeze(-1) == 0, -1e9)
        pooled = masked.max(dim=1).values
    else:
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    if checkpoint.normalize:
        pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
    return pooled


def save_tokenizer(checkpoint: Checkpoint, out_dir: Path) -> None:
    """Save the fast tokenizer with padding and truncation cleared: they are set at run time from the manifest."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path), local_files_only=True, use_fast=True)
    backend = tokenizer.backend_tokenizer
    backend.no_padding()
    backend.no_truncation()
    backend.save(str(out_dir / TOKENIZER_FILE))


def export_onnx(
    module: torch.nn.Module, input_names: list[str], output_name: str, sample: TextTokenizer, path: Path
) -> None:
    """Trace `module` on two texts tokenized by `sample` into `path`, batch and sequence axes dynamic."""
    import onnx
    import torch

    encoded = sample.encode(VALIDATION_TEXTS[:2])
    example = tuple(torch.from_numpy(t) for t in encoded.tensors(input_names).values())
    dynamic_axes = {n: {0: "batch", 1: "sequence"} for n in input_names}
    dynamic_axes[output_name] = {0: "batch"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings; the validation against PyTorch guards correctness
        torch.onnx.export(
            module,
            example,
            str(path),
            input_names=input_names,
            output_names=[output_name],
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            dynamo=False,
        )
    onnx.checker.check_model(str(path))
