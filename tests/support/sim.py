"""What a stack on the simulated accelerator (`DEVICE=sim`) must answer, computed here from the model's own tokenizer
and the device's embedding, and how long concurrent requests take."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.sim_device import Embedder
from services.common.tokenization import TextTokenizer

FIXED_US = 120_000.0
"""The tests' device: 120 ms a batch, plus 4 ms a padded token, so its time stands far above this machine's noise."""
PER_TOKEN_US = 4_000.0
TEXT = "the simulated device answers this sentence"


def sim_env(prefix: str, lock_file: Path) -> dict[str, str]:
    """An HTTP stack's settings for the tests' device, every worker sharing `lock_file`."""
    return {
        f"{prefix}DEVICE": "sim",
        f"{prefix}SIM_FIXED_US": str(FIXED_US),
        f"{prefix}SIM_PER_TOKEN_US": str(PER_TOKEN_US),
        f"{prefix}SIM_LOCK_FILE": str(lock_file),
    }


def token_width(model_dir: Path, text: str = TEXT) -> int:
    """Padded tokens of `text` alone, as every stack's tokenizer pads it."""
    manifest = Manifest.load(model_dir)
    return TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length).encode([text]).shape[1]


def expected_vectors(model_dir: Path, texts: list[str]) -> np.ndarray:
    """The device's answer for `texts`: the tokenizer's ids through the device's embedding."""
    manifest = Manifest.load(model_dir)
    encoded = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length).encode(texts)
    return Embedder(manifest.output_dim, manifest.max_seq_length)(encoded.input_ids, encoded.attention_mask)


def modelled_seconds(batches: int, rows: int, width: int) -> float:
    """Device time of `batches` batches holding `rows` texts of `width` tokens between them."""
    return (batches * FIXED_US + rows * width * PER_TOKEN_US) / 1e6


def concurrently(count: int, call: Callable[[int], object]) -> tuple[list, float]:
    """`call(i)` for i in range(count), all at once: the results and the wall time."""
    with ThreadPoolExecutor(count) as pool:
        start = time.perf_counter()
        results = list(pool.map(call, range(count)))
        return results, time.perf_counter() - start


def assert_unit_norm(vectors: np.ndarray, width: int) -> None:
    assert vectors.shape[-1] == width
    assert np.allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)
