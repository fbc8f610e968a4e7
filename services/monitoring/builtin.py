"""Built-in input and output statistics of every prediction, no user code: token length and truncation per text,
the embedding norm (embedding models), the predicted label and its score (classifiers). Recorded per endpoint and
version (labels only for versions that were resolved, so bounded) and fed to the drift monitor. Per text, so a
coalesced batch records all its rows at once; texts per request is recorded by the data plane, per request."""

from __future__ import annotations

import numpy as np

from observability import metrics
from observability.metrics import child
from observability.tally import TALLY
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
    TALLY.observe_many(child(metrics.TOKEN_LENGTH, endpoint, version), token_counts)
    TALLY.inc(child(metrics.ENDPOINT_TEXTS, endpoint, version), len(token_counts))
    TALLY.inc(child(metrics.ENDPOINT_TRUNCATED, endpoint, version), sum(truncated))  # its series exists: 0 too
    features: dict[str, tuple[list, bool]] = {"token_length": (list(token_counts), False)}
    if model.manifest.task == "classification":
        probabilities = softmax(np.asarray(outputs, dtype=np.float64))
        labels = model.manifest.labels or [str(i) for i in range(probabilities.shape[-1])]
        best = probabilities.argmax(axis=-1)
        top = probabilities.max(axis=-1)
        for index, score in zip(best, top, strict=True):
            TALLY.inc(child(metrics.PREDICTED_LABEL, endpoint, version, labels[index]))
            TALLY.observe(child(metrics.TOP_SCORE, endpoint, version), float(score))
        features["predicted_label"] = ([labels[i] for i in best], True)
        features["top_score"] = (top.tolist(), False)
    else:
        norms = np.linalg.norm(np.asarray(outputs, dtype=np.float64).reshape(len(token_counts), -1), axis=1)
        norm_values = norms.tolist()
        TALLY.observe_many(child(metrics.EMBEDDING_NORM, endpoint, version), norm_values)
        features["embedding_norm"] = (norm_values, False)
    if monitor is not None:
        for name, (values, categorical) in features.items():
            monitor.observe(endpoint, version, name, values, categorical)
