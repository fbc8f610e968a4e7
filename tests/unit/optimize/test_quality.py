"""The quality measures on small arrays whose answers are known by hand, and the gate's verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from services.optimize.quality import Gate, QualityReport, cosines, judge, measure, nearest, topk_agreement


def test_cosines_are_row_wise_and_ignore_length():
    source = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    variant = np.array([[3.0, 0.0], [2.0, 0.0], [-1.0, -1.0]])
    assert cosines(source, variant) == pytest.approx([1.0, 0.0, -1.0])


def test_a_zero_row_has_cosine_zero():
    assert cosines(np.zeros((1, 3)), np.ones((1, 3))) == pytest.approx([0.0])


def test_nearest_excludes_itself_and_orders_by_similarity():
    # Four directions on a circle: 0 deg, 10 deg, 90 deg, 180 deg.
    angles = np.radians([0, 10, 90, 180])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    assert nearest(vectors, 2).tolist() == [[1, 2], [0, 2], [1, 0], [2, 1]]


def test_topk_agreement_is_one_for_the_same_vectors_and_scaled_copies():
    vectors = np.random.default_rng(0).normal(size=(30, 8))
    assert topk_agreement(vectors, vectors * 3.0, k=5) == 1.0


def test_topk_agreement_counts_shared_neighbours():
    # Directions at 0, 20, 45 and 80 degrees: each row's nearest (k=1) is the closest angle.
    angles = np.radians([0, 20, 45, 80])
    source = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    assert nearest(source, 1).ravel().tolist() == [1, 0, 1, 2]
    # Rows 0 and 3 swap directions (now 80, 20, 45, 0): only row 2 keeps its nearest neighbour (row 1).
    variant = source[[3, 1, 2, 0]]
    assert nearest(variant, 1).ravel().tolist() == [2, 3, 1, 1]
    assert topk_agreement(source, variant, k=1) == pytest.approx(1 / 4)


def test_topk_agreement_needs_more_texts_than_k():
    with pytest.raises(ValueError, match="more than 10 texts"):
        topk_agreement(np.ones((10, 2)), np.ones((10, 2)), k=10)


def test_judge_names_each_failed_gate_with_its_numbers():
    report = judge(QualityReport(texts=1200, mean_cosine=0.985, min_cosine=0.9, topk_agreement=0.85))
    assert report.failures == ["mean cosine 0.9850 < 0.99", "top-10 neighbour agreement 0.8500 < 0.9"]
    assert not report.passed


def test_a_figure_just_below_its_gate_is_shown_with_the_digits_that_say_so():
    report = judge(QualityReport(texts=3, mean_cosine=0.99999997, min_cosine=0.9, gate=Gate(min_mean_cosine=1.0)))
    assert report.failures == ["mean cosine 0.99999997 < 1.0"]


def test_judge_passes_a_report_at_the_gate():
    report = judge(QualityReport(texts=1200, mean_cosine=0.99, min_cosine=0.97, topk_agreement=0.9))
    assert report.passed and report.failures == []


def test_judge_holds_a_classifier_to_its_accuracy_drop():
    gate = Gate(max_accuracy_drop=0.05)
    kept = judge(QualityReport(texts=5, mean_cosine=1, min_cosine=1, accuracy=0.9, source_accuracy=0.94, gate=gate))
    lost = judge(QualityReport(texts=5, mean_cosine=1, min_cosine=1, accuracy=0.8, source_accuracy=0.9, gate=gate))
    assert kept.passed
    assert lost.failures == ["accuracy 0.8000 is 0.1000 below the source's 0.9000 (at most 0.05)"]


def test_a_classifier_is_gated_on_its_labels_not_the_cosine_of_its_logits():
    flipped_logits = QualityReport(
        task="classification", texts=100, mean_cosine=0.5, min_cosine=-1.0, label_agreement=0.99
    )
    assert judge(flipped_logits).passed
    disagreeing = QualityReport(task="classification", texts=100, mean_cosine=1.0, min_cosine=1.0, label_agreement=0.9)
    assert judge(disagreeing).failures == ["label agreement 0.9000 < 0.98"]


def test_measure_an_embedding_variant():
    rng = np.random.default_rng(1)
    source = rng.normal(size=(40, 16))
    report = measure(source, source + rng.normal(scale=1e-4, size=source.shape), task="embedding", gate=Gate())
    assert report.texts == 40 and report.mean_cosine > 0.999 and report.topk_agreement == 1.0
    assert report.passed and report.label_agreement is None
    assert set(report.metrics()) == {"mean_cosine", "min_cosine", "topk_agreement"}


def test_measure_a_classifier_counts_labels_and_accuracy():
    source = np.array([[2.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 3.0]])
    variant = np.array([[2.0, 1.0], [1.0, 0.5], [1.0, 0.0], [0.0, 3.0]])  # row 1 flips to label 0
    truth = np.array([0, 1, 0, 1])
    report = measure(source, variant, task="classification", gate=Gate(), labelled=(truth, source, variant))
    assert report.topk_agreement is None
    assert report.label_agreement == pytest.approx(0.75)
    assert (report.source_accuracy, report.accuracy, report.labelled_rows) == (1.0, 0.75, 4)
    assert report.failures == [
        "label agreement 0.7500 < 0.98",
        "accuracy 0.7500 is 0.2500 below the source's 1.0000 (at most 0.01)",
    ]
