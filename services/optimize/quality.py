"""How close a variant's outputs are to its source's, and the gate a variant must pass: pure functions over arrays.

For embeddings: the cosine between each text's two vectors (mean and minimum), and the agreement of the top-k
nearest neighbours of every text within the set (what a vector index built on one and queried with the other sees):
the share of each text's k nearest neighbours under the source that are also among its k nearest under the variant,
averaged over texts. For a classifier: the share of texts given the same label, and accuracy on labelled rows; the
cosine of its logits is reported, not gated (two logits near the decision boundary flip the cosine's sign while the
label holds).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

TOP_K = 10


class Gate(BaseModel):
    """The least a variant must measure to be written (overridable, and the report then says what failed)."""

    min_mean_cosine: float = Field(0.99, ge=-1.0, le=1.0, description="embeddings only")
    min_topk_agreement: float = Field(0.9, ge=0.0, le=1.0, description="embeddings only")
    max_accuracy_drop: float = Field(0.01, ge=0.0, le=1.0, description="classifiers with labelled rows only")
    min_label_agreement: float = Field(0.98, ge=0.0, le=1.0, description="classifiers only")


class QualityReport(BaseModel):
    """A variant measured against its source on `texts` held-out texts."""

    task: str = "embedding"
    texts: int
    mean_cosine: float
    min_cosine: float
    top_k: int = TOP_K
    topk_agreement: float | None = None
    label_agreement: float | None = None
    accuracy: float | None = None
    source_accuracy: float | None = None
    labelled_rows: int | None = None
    gate: Gate = Field(default_factory=Gate)
    failures: list[str] = Field(default_factory=list, description="each gate the variant failed, with its numbers")
    overridden: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures

    def metrics(self) -> dict[str, float]:
        """The measured numbers by name (MLflow metrics)."""
        names = ("mean_cosine", "min_cosine", "topk_agreement", "label_agreement", "accuracy", "source_accuracy")
        return {name: float(value) for name in names if (value := getattr(self, name)) is not None}


def cosines(source: np.ndarray, variant: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (texts x width) arrays; a zero row has cosine 0 with anything."""
    a, b = np.asarray(source, np.float64), np.asarray(variant, np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.divide((a * b).sum(axis=1), norms, out=np.zeros(len(a)), where=norms > 0)


def nearest(vectors: np.ndarray, k: int) -> np.ndarray:
    """Indices of each row's k most cosine-similar other rows (itself excluded), most similar first; ties go to the
    lower index."""
    x = np.asarray(vectors, np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    similarity = x @ x.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def topk_agreement(source: np.ndarray, variant: np.ndarray, k: int = TOP_K) -> float:
    """Mean over rows of |top-k(source) ∩ top-k(variant)| / k; ValueError when the set has k rows or fewer."""
    if len(source) <= k:
        raise ValueError(f"top-{k} agreement needs more than {k} texts, got {len(source)}")
    a, b = nearest(source, k), nearest(variant, k)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a.tolist(), b.tolist(), strict=True)]))


def shown(value: float, limit: float) -> str:
    """`value` with 4 decimals, or as many more (up to 12) as it takes not to read as `limit`."""
    for digits in range(4, 13):
        if float(text := f"{value:.{digits}f}") != limit:
            return text
    return text


def judge(report: QualityReport) -> QualityReport:
    """`report` with `failures` filled in from its gate."""
    gate, failures = report.gate, []
    if report.task == "embedding" and report.mean_cosine < gate.min_mean_cosine:
        failures.append(f"mean cosine {shown(report.mean_cosine, gate.min_mean_cosine)} < {gate.min_mean_cosine}")
    if report.topk_agreement is not None and report.topk_agreement < gate.min_topk_agreement:
        failures.append(
            f"top-{report.top_k} neighbour agreement {shown(report.topk_agreement, gate.min_topk_agreement)} "
            f"< {gate.min_topk_agreement}"
        )
    if report.label_agreement is not None and report.label_agreement < gate.min_label_agreement:
        failures.append(
            f"label agreement {shown(report.label_agreement, gate.min_label_agreement)} < {gate.min_label_agreement}"
        )
    if report.accuracy is not None and report.source_accuracy is not None:
        drop = report.source_accuracy - report.accuracy
        if drop > gate.max_accuracy_drop:
            failures.append(
                f"accuracy {report.accuracy:.4f} is {drop:.4f} below the source's {report.source_accuracy:.4f} "
                f"(at most {gate.max_accuracy_drop})"
            )
    return report.model_copy(update={"failures": failures})


def measure(
    source: np.ndarray,
    variant: np.ndarray,
    *,
    task: str,
    gate: Gate,
    labelled: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    k: int = TOP_K,
) -> QualityReport:
    """The report of `variant`'s outputs against `source`'s on the same texts, judged by `gate`. `labelled`: for a
    classifier, (truth, source logits, variant logits) on labelled rows."""
    cos = cosines(source, variant)
    fields: dict = {
        "task": task,
        "texts": len(cos),
        "mean_cosine": float(cos.mean()),
        "min_cosine": float(cos.min()),
        "top_k": k,
    }
    if task == "embedding":
        fields["topk_agreement"] = topk_agreement(source, variant, k)
    else:
        fields["label_agreement"] = float(np.mean(source.argmax(axis=1) == variant.argmax(axis=1)))
        if labelled is not None:
            truth, source_logits, variant_logits = labelled
            fields["source_accuracy"] = float(np.mean(source_logits.argmax(axis=1) == truth))
            fields["accuracy"] = float(np.mean(variant_logits.argmax(axis=1) == truth))
            fields["labelled_rows"] = len(truth)
    return judge(QualityReport(gate=gate, **fields))
