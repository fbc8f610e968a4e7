"""Model output -> response payloads, for each task."""

from __future__ import annotations

import numpy as np

from services.common.contract import Manifest


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def classify(manifest: Manifest, logits: np.ndarray) -> list[dict]:
    labels = manifest.labels or [str(i) for i in range(logits.shape[-1])]
    probabilities = softmax(logits.astype(np.float64))
    results = []
    for row in probabilities:
        best = int(row.argmax())
        results.append(
            {"label": labels[best], "scores": {label: float(p) for label, p in zip(labels, row, strict=True)}}
        )
    return results
