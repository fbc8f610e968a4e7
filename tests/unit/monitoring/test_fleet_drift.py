"""The fleet's drift monitor on binned counts whose answer is known by hand, fed as Prometheus would feed it: the sum
over every worker of what each binned since the last reading (`tests/integration/monitoring/test_fleet.py`
reads a real Prometheus scraping two gateways)."""

from __future__ import annotations

import json
import math

import pytest
from prometheus_client import CollectorRegistry

from services.controller.settings import FleetDriftSettings
from services.monitoring.fleet_counts import Binned, per_bin
from services.monitoring.fleet_drift import FleetDrift, bin_values, binned_scores

BOUNDS = ["8.0", "16.0", "32.0", "64.0", "+Inf"]
SHORT, LONG = [6, 9, 12, 14], [40, 50, 60, 70]
"""Token lengths of short texts (bins 8 and 16) and of long ones (64 and +Inf)."""
SETTINGS = {"reference_size": 200, "window_size": 200, "min_samples": 100}


class Workers:
    """Token lengths binned by each of `n` workers; `read` answers what Prometheus' `sum by` of their growth since the
    last reading would."""

    def __init__(self, n: int):
        self.binned = [dict.fromkeys(BOUNDS, 0.0) for _ in range(n)]
        self.read_so_far = dict.fromkeys(BOUNDS, 0.0)

    def observe(self, worker: int, value: int, count: int) -> None:
        bucket = next(b for b in BOUNDS if value <= float(b))
        self.binned[worker][bucket] += count

    def read(self, since: float | None, at: float) -> dict:
        total = {b: sum(worker[b] for worker in self.binned) for b in BOUNDS}
        grown = {b: total[b] - self.read_so_far[b] for b in BOUNDS}
        self.read_so_far = total
        return {("e", "1", "token_length"): Binned(False, grown)}


def send(workers: Workers, lengths: list[int], count: int) -> None:
    """`count` texts, of the `lengths` in turn, spread evenly over the workers."""
    share = count // len(workers.binned)
    values = [lengths[i % len(lengths)] for i in range(share)]
    for index in range(len(workers.binned)):
        for value in values:
            workers.observe(index, value, 1)


def test_binned_psi_and_ks_by_hand():
    # reference 50/50 over two bins, window 90/10: PSI as for the categorical case, KS the gap at the first edge
    scores = binned_scores({"1.0": 50, "+Inf": 50}, {"1.0": 90, "+Inf": 10}, categorical=False)
    assert scores["psi"] == pytest.approx(0.4 * math.log(1.8) + 0.4 * math.log(5), rel=1e-6)
    assert scores["ks"] == pytest.approx(0.4)
    assert binned_scores({"a": 5, "b": 5}, {"b": 1, "a": 1}, categorical=True) == {"psi": pytest.approx(0.0)}


def test_cumulative_buckets_become_counts_per_bin_and_data_set_values_fall_in_the_same_bins():
    assert per_bin({"+Inf": 10, "4": 3, "8.0": 7}) == {"4.0": 3, "8.0": 4, "+Inf": 3}
    assert bin_values([1, 8, 9, 1000], False, BOUNDS) == {"8.0": 2, "16.0": 1, "+Inf": 1}, "a value on an edge: le"
    assert bin_values(["a", "b", "a"], True, []) == {"a": 2, "b": 1}


def fleet(workers: Workers, **overrides) -> FleetDrift:
    return FleetDrift(workers.read, FleetDriftSettings(**(SETTINGS | overrides)), registry=CollectorRegistry())


def test_the_fleet_detects_a_shift_with_the_traffic_one_worker_needed():
    one, two = Workers(1), Workers(2)
    fleets = {"one worker": fleet(one), "two workers": fleet(two)}
    for phase, (value, count) in enumerate([(SHORT, 200), (LONG, 200)]):
        send(one, value, count)
        send(two, value, count)
        for monitor in fleets.values():
            monitor.poll(float(phase))
    scores = {name: monitor.scores() for name, monitor in fleets.items()}
    print("fleet scores:", scores)
    assert scores["one worker"] == scores["two workers"], "the same traffic merged gives the same score"
    assert scores["two workers"][("e", "1", "token_length", "psi")] > 0.25


def test_no_score_before_the_reference_and_min_samples_then_the_window_is_the_latest_values():
    workers = Workers(2)
    monitor = fleet(workers)
    send(workers, SHORT, 150)
    monitor.poll(0.0)
    assert monitor.scores() == {}, "150 values: the reference wants 200"
    send(workers, SHORT, 100)
    monitor.poll(1.0)
    send(workers, SHORT, 60)
    monitor.poll(2.0)
    assert monitor.scores() == {}, "60 values since the reference: fewer than min_samples"
    send(workers, SHORT, 60)
    monitor.poll(3.0)
    assert monitor.scores()[("e", "1", "token_length", "psi")] < 0.01, "the same lengths"
    for step in range(4):
        send(workers, LONG, 100)
        monitor.poll(4.0 + step)
    psi = monitor.scores()[("e", "1", "token_length", "psi")]
    shares = monitor.tracks[("e", "1", "token_length")].window(200)
    assert sum(shares.values()) == 200 and shares["8.0"] == shares["16.0"] == 0, "the latest 200 values only"
    assert psi > 5, psi


def test_a_data_set_reference_is_binned_into_the_fleets_bins_and_a_taken_one_is_kept(tmp_path):
    workers = Workers(2)
    references = {
        ("e", "1"): {
            "token_length": {"values": [60] * 50 + [10] * 50, "categorical": False},
            "predicted_label": {"values": ["positive"] * 3 + ["negative"], "categorical": True},
        }
    }
    monitor = FleetDrift(
        workers.read,
        FleetDriftSettings(**SETTINGS),
        lambda e, v: references.get((e, v)),
        CollectorRegistry(),
        tmp_path / "kept.json",
    )
    send(workers, SHORT, 2)
    labels = {("e", "1", "predicted_label"): Binned(True, {"positive": 1.0})}
    monitor.read = lambda since, at: workers.read(since, at) | labels
    monitor.poll(0.0)
    assert monitor.tracks[("e", "1", "token_length")].reference == {"16.0": 50, "64.0": 50}
    assert monitor.tracks[("e", "1", "predicted_label")].reference == {"positive": 3, "negative": 1}
    assert not (tmp_path / "kept.json").exists(), "a data-set reference is the version's own: nothing to keep"
    references.clear()
    taken = Workers(1)
    send(taken, SHORT, 300)
    FleetDrift(taken.read, FleetDriftSettings(**SETTINGS), reference_file=tmp_path / "kept.json").poll(0.0)
    restarted = Workers(1)
    send(restarted, LONG, 300)
    again = FleetDrift(restarted.read, FleetDriftSettings(**SETTINGS), reference_file=tmp_path / "kept.json")
    again.poll(0.0)
    assert again.tracks[("e", "1", "token_length")].reference == {
        "8.0": 75,
        "16.0": 225,
        "32.0": 0,
        "64.0": 0,
        "+Inf": 0,
    }
    send(restarted, LONG, 150)
    again.poll(1.0)
    assert again.scores()[("e", "1", "token_length", "psi")] > 5


def test_scores_are_exported_once_for_the_fleet_and_dropped_with_a_version_gone_for_an_hour():
    registry = CollectorRegistry()
    workers = Workers(2)
    monitor = FleetDrift(workers.read, FleetDriftSettings(**SETTINGS), registry=registry)
    send(workers, SHORT, 200)
    monitor.poll(0.0)
    send(workers, LONG, 200)
    monitor.poll(1.0)
    monitor.export(1.0)
    labels = {"endpoint": "e", "version": "1", "feature": "token_length", "method": "psi"}
    assert registry.get_sample_value("serving_drift_score", labels) > 0.25
    monitor.export(1.0 + 3601)
    assert registry.get_sample_value("serving_drift_score", labels) is None


def test_the_controller_reads_a_deployed_versions_data_set_reference_once(tmp_path):
    from services.controller.fleet_monitor import DataSetReferences
    from services.lifecycle.deployments import EndpointState, VersionState
    from services.lifecycle.store import DeploymentStore
    from services.monitoring.drift import REFERENCE_FILE

    model_dir = tmp_path / "models" / "emb" / "1" / "model"  # the controller's copy, where it wrote the reference
    model_dir.mkdir(parents=True)
    reference = {"token_length": {"values": [10, 60], "categorical": False}}
    (model_dir / REFERENCE_FILE).write_text(json.dumps(reference))
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / REFERENCE_FILE).write_text(json.dumps(reference))
    store = DeploymentStore.open(f"sqlite:///{tmp_path / 'state.db'}")
    versions = {
        "1": VersionState(version="1", state="live", model_dir=str(model_dir)),
        "2": VersionState(version="2", state="live", model_dir=str(planted)),  # never read: not its copy
    }
    store.update(lambda s: s.endpoints.update(emb=EndpointState(versions=versions)))
    references = DataSetReferences(store, tmp_path / "models")
    assert references("emb", "1") == reference
    assert references("emb", "2") is None and references("other", "1") is None, "no copy, no endpoint: none"
    (model_dir / REFERENCE_FILE).unlink()
    assert references("emb", "1") == reference, "read once"
