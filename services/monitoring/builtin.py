"""Built-in input and output statistics of every prediction, no user code: token length and truncation per text,
the embedding norm (embedding models), the predicted label and its score (classifiers). Recorded per endpoint and
version (labels only for versions that were resolved, so bounded) and fed to the drift monitor. Per text, so a
coalesced batch records all its rows at once; texts per request is recorded by the data plane, per request."""

from __future__ import annotations

import numpy as np

from observability import metrics
from services.common.backend import ServedModel
from services.common.outputs import softmax
from services.monitoring.drift import DriftMonitor


def record_prediction(
    model: ServedModel,
    outputs: np.ndarray,
    token_counts: list[int],
    truncated: list[bool],
    monitor: DriftMonitor | None,
) -> None:
    endpoint, version = model.endpoint, model.version
    lengths = metrics.TOKEN_LENGTH.labels(endpoint, version)
    for count in token_counts:
        lengths.observe(count)
    metrics.ENDPOINT_TEXTS.labels(endpoint, version).inc(len(token_counts))
    metrics.ENDPOINT_TRUNCATED.labels(endpoint, version).inc(sum(truncated))  # 0 too: the rate has a series
    features: dict[str, tuple[list, bool]] = {"token_length": (list(token_counts), False)}
    if model.manifest.task == "classification":
        probabilities = softmax(np.asarray(outputs, dtype=np.float64))
        labels = model.manifest.labels or [str(i) for i in range(probabilities.shape[-1])]
        best = probabilities.argmax(axis=-1)
        top = probabilities.max(axis=-1)
        for index, score in zip(best, top, strict=True):
            metrics.PREDICTED_LABEL.labels(endpoint, version, labels[index]).inc()
            metrics.TOP_SCORE.labels(endpoint, version).observe(float(score))
        features["predicted_label"] = ([labels[i] for i in best], True)
        features["top_score"] = (top.tolist(), False)
    else:
        norms = np.linalg.norm(np.asarray(outputs, dtype=np.float64).reshape(len(token_counts), -1), axis=1)
        histogram = metrics.EMBEDDING_NORM.labels(endpoint, version)
        for norm in norms:
            histogram.observe(float(norm))
        features["embedding_norm"] = (norms.tolist(), False)
    if monitor is not None:
        for name, (values, categorical) in features.items():
            monitor.observe(endpoint, version, name, values, categorical)
