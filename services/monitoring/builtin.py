"""Built-in input and output statistics of every prediction, no user code: token length and truncation per text,
the embedding norm (embedding models), the predicted label and its score (classifiers). Recorded per endpoint and
version (labels only for versions that were resolved, so bounded); the host's drift judge reads them back
(`host_counts`). Per text, so a coalesced batch records all its rows at once; texts per request is recorded by the
data plane, per request."""

from __future__ import annotations

import numpy as np

from observability import metrics
from services.common.backend import ServedModel
from services.common.outputs import softmax


def record_prediction(
    model: ServedModel,
    outputs: np.ndarray,
    token_counts: list[int],
    truncated: list[bool],
) -> None:
    endpoint, version = model.endpoint, model.version
    lengths = metrics.TOKEN_LENGTH.labels(endpoint, version)
    for count in token_counts:
        lengths.observe(count)
    metrics.ENDPOINT_TEXTS.labels(endpoint, version).inc(len(token_counts))
    metrics.ENDPOINT_TRUNCATED.labels(endpoint, version).inc(sum(truncated))  # 0 too: the rate has a series
    if model.manifest.task == "classification":
        probabilities = softmax(np.asarray(outputs, dtype=np.float64))
        labels = model.manifest.labels or [str(i) for i in range(probabilities.shape[-1])]
        best = probabilities.argmax(axis=-1)
        top = probabilities.max(axis=-1)
        for index, score in zip(best, top, strict=True):
            metrics.PREDICTED_LABEL.labels(endpoint, version, labels[index]).inc()
            metrics.TOP_SCORE.labels(endpoint, version).observe(float(score))
    else:
        norms = np.linalg.norm(np.asarray(outputs, dtype=np.float64).reshape(len(token_counts), -1), axis=1)
        histogram = metrics.EMBEDDING_NORM.labels(endpoint, version)
        for norm in norms:
            histogram.observe(float(norm))
