"""Built-in input and output statistics of every prediction, no user code: token length and truncation per text,
the embedding norm (embedding models), the predicted label and its score (classifiers). Recorded per endpoint and
version (labels only for versions that were resolved, so bounded); the host's drift judge reads them back
(`host_counts`). Per text, so a coalesced batch records all its rows at once; texts per request is recorded by the
data plane, per request."""

from __future__ import annotations

import numpy as np

from observability import metrics
from observability.metrics import child
from observability.tally import TALLY
from services.common.backend import ServedModel
from services.common.outputs import softmax


def record_prediction(
    model: ServedModel,
    outputs: np.ndarray,
    token_counts: list[int],
    truncated: list[bool],
) -> None:
    endpoint, version = model.endpoint, model.version
    TALLY.observe_many(child(metrics.TOKEN_LENGTH, endpoint, version), token_counts)
    TALLY.inc(child(metrics.ENDPOINT_TEXTS, endpoint, version), len(token_counts))
    TALLY.inc(child(metrics.ENDPOINT_TRUNCATED, endpoint, version), sum(truncated))  # its series exists: 0 too
    if model.manifest.task == "classification":
        probabilities = softmax(np.asarray(outputs, dtype=np.float64))
        labels = model.manifest.labels or [str(i) for i in range(probabilities.shape[-1])]
        best = probabilities.argmax(axis=-1)
        top = probabilities.max(axis=-1)
        for index, score in zip(best, top, strict=True):
            TALLY.inc(child(metrics.PREDICTED_LABEL, endpoint, version, labels[index]))
            TALLY.observe(child(metrics.TOP_SCORE, endpoint, version), float(score))
    else:
        rows = np.asarray(outputs, dtype=np.float64).reshape(len(token_counts), -1)
        norms = np.sqrt(np.add.reduce(rows * rows, axis=1))  # np.linalg.norm's own sum, without its checks
        TALLY.observe_many(child(metrics.EMBEDDING_NORM, endpoint, version), norms.tolist())
