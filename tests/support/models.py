"""Model directories for tests.

- `export_tiny`: a real export (torch -> ONNX) of a 2-layer random BERT; integration and end-to-end tiers only.
- `unit_model_dir`: what the unit tier uses instead: the tiny model's real tokenizer (HF `tokenizers`) and a
  hand-written manifest, with a placeholder where the ONNX file would be. Nothing in it can run a forward pass; it is
  enough for tokenization, the tensor contract and rendering Triton configs, without torch.
- `reference_outputs`: what PyTorch answered for the export's validation texts, recorded at export time: the truth
  a server's answers are compared with.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from services.common.contract import (
    MANIFEST_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    BuildInfo,
    Manifest,
    Reference,
    SourceInfo,
    TensorSpec,
    sha256_file,
)

ROOT = Path(__file__).resolve().parent.parent.parent
REAL_MODEL = ROOT / "build" / "model"
UNIT_MAX_LENGTH = 64
UNIT_HIDDEN = 32


def export_tiny(base: Path, task: str, name: str) -> Path:
    """A 2-layer random BERT checkpoint in base/checkpoint, exported to base/model."""
    from services.modelbuild.export import build
    from services.modelbuild.tiny import write_tiny_checkpoint

    checkpoint = write_tiny_checkpoint(base / "checkpoint", task=task)
    build(base / "model", checkpoint, name=name)
    return base / "model"


def unit_model_dir(path: Path, task: str = "embedding") -> Path:
    from services.modelbuild.tiny import tiny_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    tiny_tokenizer().save(str(path / TOKENIZER_FILE))
    (path / MODEL_FILE).write_bytes(b"placeholder: unit tests never run this model")
    classifier = task == "classification"
    manifest = Manifest(
        name=f"unit-{task}",
        task=task,
        max_seq_length=UNIT_MAX_LENGTH,
        pooling=None if classifier else "mean",
        normalize=not classifier,
        labels=["negative", "positive"] if classifier else None,
        inputs=[
            TensorSpec(name=n, dtype="INT64", shape=[-1, -1]) for n in ("input_ids", "attention_mask", "token_type_ids")
        ],
        outputs=[
            TensorSpec(
                name="logits" if classifier else "embedding", dtype="FP32", shape=[-1, 2 if classifier else UNIT_HIDDEN]
            )
        ],
        files={name: sha256_file(path / name) for name in (TOKENIZER_FILE, MODEL_FILE)},
        source=SourceInfo(path="written by tests.support.models"),
        build=BuildInfo(
            fingerprint="unit",
            created_at="2026-01-01T00:00:00+00:00",
            opset=17,
            torch="-",
            transformers="-",
            onnx="-",
            max_abs_diff=0.0,
        ),
    )
    manifest.save(path)
    assert (path / MANIFEST_FILE).is_file()
    return path


def reference_outputs(model_dir: Path, texts: list[str]) -> np.ndarray:
    """PyTorch's outputs for `texts` (each one of the export's validation texts), recorded at export time."""
    reference = Reference.load(model_dir)
    return np.stack([reference.output_of(text) for text in texts])


def validation_texts(model_dir: Path) -> list[str]:
    return Reference.load(model_dir).texts
