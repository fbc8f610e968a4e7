"""The export's check against PyTorch: ONNX Runtime must answer what the checkpoint answered, within TOLERANCE, on
texts chosen to be awkward (punctuation, several scripts, emoji, one of 400 words that the tokenizer truncates),
batched and one at a time. The texts and PyTorch's answers are kept as `reference.json` for the servers' tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from services.common.contract import Manifest
from services.common.errors import ModelBuildError
from services.common.onnx_runner import OnnxModel
from services.common.tokenization import TextTokenizer

TOLERANCE = 1e-4
VALIDATION_TEXTS = [
    "hello world",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog while the cat watches from the window.",
    "Triton groups requests into batches on the server side.",
    "Ceci n'est pas une pipe; 这是一个测试 — emojis 🚀 and numbers 12345.",
    " ".join(["Long inputs are truncated at the model's maximum sequence length."] * 40),
]


def max_abs_diff(model_dir: Path, manifest: Manifest, tokenizer: TextTokenizer, expected: np.ndarray) -> float:
    """ONNX Runtime against the PyTorch outputs, on the validation texts batched and one at a time."""
    runner = OnnxModel(model_dir, manifest)
    names = manifest.input_names
    batched = runner.run(tokenizer.encode(VALIDATION_TEXTS).tensors(names))
    singles = np.concatenate([runner.run(tokenizer.encode([t]).tensors(names)) for t in VALIDATION_TEXTS])
    return float(max(np.abs(batched - expected).max(), np.abs(singles - expected).max()))


def check(name: str, diff: float) -> None:
    """Raise unless `diff` is a number within TOLERANCE."""
    if not np.isfinite(diff) or diff > TOLERANCE:
        raise ModelBuildError(
            f"ONNX export of {name} does not match PyTorch: max abs diff {diff:.2e} > {TOLERANCE:.0e}"
        )
