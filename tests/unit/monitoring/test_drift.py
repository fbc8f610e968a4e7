"""One host's drift judge over its workers' merged counts, fed the samples `/metrics` would show (the real gunicorn
workers: `tests/integration/monitoring/test_host_drift.py`)."""

import asyncio
import json

import pytest
from prometheus_client import REGISTRY

from services.common.settings import DriftSettings
from services.monitoring.drift import JUDGE_LOCK, REFERENCE_FILE, REFERENCES_FILE, DriftMonitor
from services.monitoring.fleet_counts import Binned
from services.monitoring.host_counts import HostFeatureCounts, cumulative_counts

BOUNDS = (8.0, 16.0, 32.0, 64.0, float("inf"))
SHORT, LONG = [6, 9, 12, 14], [40, 50, 60, 70]


class Host:
    """Token lengths of endpoint `e` version `1` binned by each of `n` workers; `samples` is what the host's merged
    `/metrics` shows: cumulative buckets summed over the workers."""

    def __init__(self, n: int):
        self.workers = [dict.fromkeys(BOUNDS, 0) for _ in range(n)]

    def send(self, lengths: list[int], count: int) -> None:
        """`count` texts, of `lengths` in turn, spread evenly over the workers."""
        for i in range(count):
            value = lengths[i % len(lengths)]
            self.workers[i % len(self.workers)][next(b for b in BOUNDS if value <= b)] += 1

    def samples(self):
        yield "serving_endpoint_requests_total", {"endpoint": "e", "version": "1", "code": "200"}, 1.0
        below = 0
        for bound in BOUNDS:
            below += sum(worker[bound] for worker in self.workers)
            le = "+Inf" if bound == float("inf") else str(bound)
            yield "serving_endpoint_token_length_bucket", {"endpoint": "e", "version": "1", "le": le}, float(below)


def score(feature: str = "token_length", method: str = "psi", version: str = "1") -> float | None:
    labels = {"endpoint": "e", "version": version, "feature": feature, "method": method}
    return REGISTRY.get_sample_value("serving_drift_score", labels)


def test_the_host_reads_each_features_growth_since_its_last_reading_and_a_counter_that_went_back_from_zero():
    readings = iter(
        [
            [
                ("serving_endpoint_top_score_bucket", {"endpoint": "e", "version": "1", "le": le}, n)
                for le, n in (("0.5", 2.0), ("1.0", 5.0), ("+Inf", 5.0))
            ]
            + [("serving_endpoint_predicted_label_total", {"endpoint": "e", "version": "1", "label": "pos"}, 4.0)],
            [
                ("serving_endpoint_top_score_bucket", {"endpoint": "e", "version": "1", "le": le}, n)
                for le, n in (("0.5", 3.0), ("1.0", 9.0), ("+Inf", 9.0))
            ]
            + [("serving_endpoint_predicted_label_total", {"endpoint": "e", "version": "1", "label": "pos"}, 1.0)],
        ]
    )
    counts = HostFeatureCounts(lambda: next(readings))
    assert counts.read(None, 0.0)[("e", "1", "top_score")] == Binned(False, {"0.5": 2.0, "1.0": 3.0, "+Inf": 0.0})
    second = counts.read(0.0, 1.0)
    assert second[("e", "1", "top_score")] == Binned(False, {"0.5": 1.0, "1.0": 3.0, "+Inf": 0.0})
    assert second[("e", "1", "predicted_label")] == Binned(True, {"pos": 1.0}), "4 then 1: restarted, 1 since"


def test_declared_variables_are_features_of_the_endpoint_their_name_begins_with_and_other_series_are_not():
    found = cumulative_counts(
        [
            ("serving_endpoint_requests_total", {"endpoint": "my-ep", "version": "2", "code": "200"}, 3.0),
            ("serving_endpoint_requests_total", {"endpoint": "my", "version": "1", "code": "200"}, 1.0),
            ("serving_custom_my_ep_tokens_bucket", {"version": "2", "le": "4.0"}, 1.0),
            ("serving_custom_my_ep_lang_total", {"version": "2", "value": "en"}, 2.0),
            ("serving_custom_my_ep_items_total", {"version": "2"}, 7.0),  # a counter variable: no bins
            ("serving_custom_undeclared_total", {"endpoint": "my-ep"}, 1.0),
            ("serving_stage_duration_seconds_bucket", {"stage": "parse", "le": "0.1"}, 9.0),
        ]
    )
    assert found == {  # `my` prefixes the names too: the longest endpoint name wins
        ("my-ep", "2", "custom:tokens"): (False, {"4.0": 1.0}),
        ("my-ep", "2", "custom:lang"): (True, {"en": 2.0}),
    }


def monitor(tmp_path, host: Host, **settings) -> DriftMonitor:
    return DriftMonitor(DriftSettings(**settings), directory=tmp_path, samples=host.samples)


def test_two_workers_900_texts_score_once_where_each_alone_needed_500_of_its_own():
    """Default settings: the reference is the first 500 values of the host (250 a worker), not 500 a worker."""
    host = Host(2)
    judge = DriftMonitor(DriftSettings(), directory=None, samples=host.samples)
    host.send(SHORT, 500)
    judge.judge_once(0.0)
    host.send(LONG, 400)
    judge.judge_once(1.0)
    assert [sum(worker.values()) for worker in host.workers] == [450, 450], "each worker alone: under 500"
    assert score() > 0.25 and score(method="ks") == pytest.approx(1.0), "no length in common"


def test_calm_traffic_scores_near_zero():
    host = Host(2)
    judge = DriftMonitor(DriftSettings(), directory=None, samples=host.samples)
    for step, count in enumerate((500, 400)):
        host.send(SHORT, count)
        judge.judge_once(float(step))
    assert score() < 0.01


def test_one_worker_of_the_host_judges_and_the_next_takes_over_with_the_same_reference(tmp_path):
    host = Host(2)
    first, second = monitor(tmp_path, host, reference_size=100), monitor(tmp_path, host, reference_size=100)
    assert first.judging() and not second.judging(), "one lock, one judge"
    assert (tmp_path / JUDGE_LOCK).read_text().strip().isdigit(), "the lock names its holder's pid"
    host.send(SHORT, 100)
    first.judge_once(0.0)
    second.judge_once(0.0)
    assert second.judge is None
    assert json.loads((tmp_path / REFERENCES_FILE).read_text()), "the reference the host's first values gave"
    first._lock.close()  # the judge's worker exits
    host.send(LONG, 200)
    second.judge_once(1.0)
    second.judge_once(2.0)
    assert second.judging()
    track = second.judge.tracks[("e", "1", "token_length")]
    assert track.reference == {"8.0": 25.0, "16.0": 75.0, "32.0": 0.0, "64.0": 0.0, "+Inf": 0.0}, "the kept one"


def test_a_data_set_reference_is_the_versions_own(tmp_path):
    (tmp_path / REFERENCE_FILE).write_text(json.dumps({"token_length": {"values": [60] * 100, "categorical": False}}))
    host = Host(1)
    judge = DriftMonitor(DriftSettings(min_samples=10), directory=None, samples=host.samples)
    assert judge.load_reference("e", "1", tmp_path) and not judge.load_reference("e", "1", tmp_path / "none")
    host.send(SHORT, 20)
    judge.judge_once(0.0)
    host.send(SHORT, 20)
    judge.judge_once(1.0)
    assert judge.judge.tracks[("e", "1", "token_length")].reference == {"64.0": 100.0}
    assert score() > 5, "long texts in the data set, short ones live"


def test_a_host_whose_fleet_judges_drift_has_no_judge(tmp_path):
    host = Host(1)
    drift = monitor(tmp_path, host, worker_scores=False)
    asyncio.run(drift.start())
    assert drift._task is None and not (tmp_path / JUDGE_LOCK).exists()
