"""The forward pass a fetched version must pass before it is placed: the warm-up texts through the version's own
tokenizer and ONNX file with ONNX Runtime, in a child process of its own. The version is untrusted: a graph whose
run never ends or takes all memory costs that child, killed at `timeout` seconds or its address-space limit, and the
version is rejected with the reason; the controller's loop goes on."""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from services.common.contract import TOKENIZER_FILE, WARMUP_TEXTS, Manifest

MEMORY_LIMIT_BYTES = 8 << 30
"""The child's address space at most: far above what the warm-up texts need of any model a host serves."""


def isolated_forward(model_dir: Path, manifest: Manifest, timeout: float) -> np.ndarray:
    """The version's first output for the warm-up texts; ValueError with the reason when the run fails, crashes or
    outlasts `timeout` (the version's fault, so it is rejected)."""
    with tempfile.TemporaryDirectory(prefix="forward-") as scratch:
        out = Path(scratch) / "outputs.npy"
        argv = [sys.executable, "-m", __name__, str(model_dir), str(out)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_memory)
        except subprocess.TimeoutExpired:
            raise ValueError(f"the forward pass on the warm-up texts did not finish in {timeout:g} s") from None
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            why = lines[-1][:300] if lines else f"exit status {done.returncode}"
            raise ValueError(f"the forward pass on the warm-up texts failed: {why}")
        return np.load(out, allow_pickle=False)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def forward(model_dir: Path, manifest: Manifest) -> np.ndarray:
    """The forward pass itself, in this process."""
    from services.common.onnx_runner import OnnxModel
    from services.common.tokenization import TextTokenizer

    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    return OnnxModel(model_dir, manifest, threads=1).run(tokenizer.encode(WARMUP_TEXTS).tensors(manifest.input_names))


def main(argv: list[str]) -> None:
    model_dir, out = Path(argv[0]), Path(argv[1])
    np.save(out, np.asarray(forward(model_dir, Manifest.load(model_dir))), allow_pickle=False)


if __name__ == "__main__":
    main(sys.argv[1:])
