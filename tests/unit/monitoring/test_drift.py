"""Drift scores on distributions whose answer is known by hand."""

import json
import math

import numpy as np
import pytest

from services.common.settings import DriftSettings
from services.monitoring.drift import REFERENCE_FILE, DriftMonitor, ks_statistic, psi_categorical, psi_continuous


def test_psi_of_a_known_categorical_shift():
    # reference 50/50, live 90/10: (0.9-0.5) ln(0.9/0.5) + (0.1-0.5) ln(0.1/0.5) = 0.2351 + 0.6438
    psi = psi_categorical(["a", "b"] * 50, ["a"] * 90 + ["b"] * 10)
    assert psi == pytest.approx(0.4 * math.log(1.8) + 0.4 * math.log(5), rel=1e-6)
    assert psi_categorical(["a", "b"] * 50, ["b", "a"] * 50) == pytest.approx(0.0, abs=1e-12)


def test_psi_and_ks_of_continuous_samples():
    reference = np.arange(1000, dtype=float)
    assert psi_continuous(reference, reference.copy(), bins=10) == pytest.approx(0.0, abs=1e-12)
    assert ks_statistic(reference, reference + 10_000) == 1.0, "disjoint samples: the CDFs are 1 apart"
    shifted = psi_continuous(reference, reference + 500, bins=10)
    assert shifted > 0.25


def test_monitor_takes_its_first_values_as_reference_and_scores_only_full_windows():
    monitor = DriftMonitor(DriftSettings(reference_size=100, window_size=100, min_samples=50))
    monitor.observe("e", "1", "token_length", list(range(100)))
    assert monitor.scores() == {}, "the window is still empty"
    monitor.observe("e", "1", "token_length", list(range(40)))
    assert monitor.scores() == {}, "40 values are fewer than min_samples"
    monitor.observe("e", "1", "token_length", [500] * 60)
    scores = monitor.scores()
    assert scores[("e", "1", "token_length", "psi")] > 0.25 and scores[("e", "1", "token_length", "ks")] > 0.5


def test_a_reference_from_the_data_set_is_fixed(tmp_path):
    (tmp_path / REFERENCE_FILE).write_text(
        json.dumps({"predicted_label": {"values": ["pos", "neg"] * 50, "categorical": True}})
    )
    monitor = DriftMonitor(DriftSettings(reference_size=10, window_size=100, min_samples=50))
    assert monitor.load_reference("e", "2", tmp_path)
    monitor.observe("e", "2", "predicted_label", ["pos"] * 100, categorical=True)
    feature = monitor.features[("e", "2", "predicted_label")]
    assert len(feature.reference) == 100 and len(feature.window) == 100, "live values never join a fixed reference"
    assert monitor.scores()[("e", "2", "predicted_label", "psi")] > 0.25


def test_a_worker_whose_fleet_judges_drift_keeps_nothing_and_scores_nothing():
    monitor = DriftMonitor(DriftSettings(reference_size=10, window_size=10, min_samples=10, worker_scores=False))
    monitor.observe("e", "1", "token_length", list(range(100)))
    assert monitor.features == {} and monitor.scores() == {}
