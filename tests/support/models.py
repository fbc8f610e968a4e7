"""Model directories for tests.

- `export_tiny`: a real export (torch -> ONNX) of a 2-layer random BERT; integration and end-to-end tiers only.
- `unit_model_dir`: what the unit tier uses instead: the tiny model's real tokenizer (HF `tokenizers`) and the
  manifest the exporter would write for it (`services.modelbuild.manifest`), with a placeholder where the ONNX file
  would be. Nothing in it can run a forward pass; it is enough for tokenization, the tensor contract and rendering
  Triton configs, without torch.
- `reference_outputs`: what PyTorch answered for the export's validation texts, recorded at export time: the truth
  a server's answers are compared with.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from services.common.contract import MODEL_FILE, TOKENIZER_FILE, Reference

ROOT = Path(__file__).resolve().parent.parent.parent
REAL_MODEL = ROOT / "build" / "model"
UNIT_MAX_LENGTH = 64
UNIT_HIDDEN = 32
UNIT_INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
UNIT_TOOLCHAIN = {"opset": 17, "torch": "-", "transformers": "-", "onnx": "-"}
"""Stands for the versions `services.modelbuild.fingerprint.toolchain()` reads: the unit tier imports no torch."""


def export_tiny(base: Path, task: str, name: str) -> Path:
    """A 2-layer random BERT checkpoint in base/checkpoint, exported to base/model."""
    from services.modelbuild.export import build
    from services.modelbuild.tiny import write_tiny_checkpoint

    checkpoint = write_tiny_checkpoint(base / "checkpoint", task=task)
    build(base / "model", checkpoint, name=name)
    return base / "model"


def unit_model_dir(path: Path, task: str = "embedding") -> Path:
    """A model directory named `unit-<task>` with a real tokenizer, a placeholder ONNX file and a sealed manifest,
    described as the tiny checkpoint's export would be (64 tokens; 32 values, or 2 labelled scores)."""
    from services.modelbuild.checkpoint import Checkpoint
    from services.modelbuild.manifest import describe, seal
    from services.modelbuild.tiny import tiny_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    tiny_tokenizer().save(str(path / TOKENIZER_FILE))
    (path / MODEL_FILE).write_bytes(b"placeholder: unit tests never run this model")
    classifier = task == "classification"
    checkpoint = Checkpoint(
        path=path,
        name=f"unit-{task}",
        task=task,
        pooling=None if classifier else "mean",
        normalize=not classifier,
        max_seq_length=UNIT_MAX_LENGTH,
        labels=["negative", "positive"] if classifier else None,
    )
    manifest = describe(
        checkpoint,
        version="1",
        input_names=UNIT_INPUTS,
        width=2 if classifier else UNIT_HIDDEN,
        sources={},
        stamp="unit",
        tools=UNIT_TOOLCHAIN,
    )
    seal(path, manifest)
    return path


def reference_outputs(model_dir: Path, texts: list[str]) -> np.ndarray:
    """PyTorch's outputs for `texts` (each one of the export's validation texts), recorded at export time."""
    reference = Reference.load(model_dir)
    return np.stack([reference.output_of(text) for text in texts])


def validation_texts(model_dir: Path) -> list[str]:
    return Reference.load(model_dir).texts
