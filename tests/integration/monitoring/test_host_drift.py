"""Drift on one host judged once over its workers: a real gateway with two gunicorn workers in front of a real Triton,
the default drift settings (a reference of the first 500 values, 100 in the window before a score), 900 requests of
one text each. The host's 900 values are enough, where each worker judging its ~450 alone would never have taken its
500-value reference; the gateway's /metrics carries one score per endpoint version, feature and method."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadtest import engine
from loadtest.sentences import long, short
from loadtest.targets import build_targets
from services.monitoring.drift import JUDGE_LOCK, REFERENCES_FILE
from services.triton.repository import RenderOptions
from tests.support.servers import Server, start_gateway, start_triton

JUDGE_EVERY = {"SERVING_MONITORING__INTERVAL": "0.5"}  # every other drift setting at its default


@pytest.fixture(scope="module")
def triton(tmp_path_factory, tiny_model):
    server = start_triton(
        tmp_path_factory.mktemp("host-drift") / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",)
    )
    yield server
    server.stop()


def send(gateway: Server, texts: list[str]) -> None:
    spec = engine.AttackSpec(
        targets=build_targets(gateway.url, "serve", texts), concurrency=8, duration=None, requests=len(texts)
    )
    answered = []
    engine.attack(spec, lambda result: answered.append(result.code))
    assert answered.count(200) == len(texts), sorted(set(answered))


def drift_scores(gateway: Server) -> list[tuple[dict, float]]:
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        if family.name == "serving_drift_score"
        for sample in family.samples
    ]


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.25)
    return found


def judged(gateway: Server, run: Path, later: list[str]) -> list[tuple[dict, float]]:
    """500 short texts (the reference, once the judge has read them), then `later`: the scores of a judgement made
    after the last of them (the first score may come from the window's first 100 values, while they arrive)."""
    send(gateway, short(500, seed=11))
    wait_for(lambda: (run / "prometheus-api" / REFERENCES_FILE).is_file(), 30, "reference taken")
    send(gateway, later)
    wait_for(lambda: drift_scores(gateway), 30, "drift score")
    time.sleep(1.5)  # three judgements (SERVING_MONITORING__INTERVAL) after the metrics' 0.5 s flush
    return drift_scores(gateway)


def psi_of_token_length(scores: list[tuple[dict, float]]) -> float:
    (value,) = [v for labels, v in scores if labels["feature"] == "token_length" and labels["method"] == "psi"]
    return value


def one_score_per_series(scores: list[tuple[dict, float]]) -> None:
    keys = [(s["endpoint"], s["version"], s["feature"], s["method"]) for s, _ in scores]
    assert len(keys) == len(set(keys)), keys
    assert {(endpoint, feature) for endpoint, _, feature, _ in keys} == {
        ("minilm", "token_length"),
        ("minilm", "embedding_norm"),
    }, keys


def judge_is_a_worker(gateway: Server, run: Path) -> int:
    pid = int((run / "prometheus-api" / JUDGE_LOCK).read_text())
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert parent == gateway.pid, "the judge is one of the gunicorn master's workers"
    return pid


def test_two_workers_see_a_length_shift_after_900_requests(tmp_path, tiny_model, triton):
    gateway = start_gateway(tmp_path, tiny_model, triton, workers=2, env=JUDGE_EVERY)
    try:
        scores = judged(gateway, tmp_path, long(400, seed=12))
        print(f"\nshifted, 900 requests over 2 workers: {sorted((s['feature'], s['method'], v) for s, v in scores)}")
        one_score_per_series(scores)
        assert psi_of_token_length(scores) > 0.25, "the alert's threshold"
        judge_is_a_worker(gateway, tmp_path)
    finally:
        gateway.launcher.stop_all()


def test_two_workers_keep_calm_traffic_calm(tmp_path, tiny_model, triton):
    gateway = start_gateway(tmp_path, tiny_model, triton, workers=2, env=JUDGE_EVERY)
    try:
        scores = judged(gateway, tmp_path, short(400, seed=13))
        print(f"\ncalm, 900 requests over 2 workers: {sorted((s['feature'], s['method'], v) for s, v in scores)}")
        one_score_per_series(scores)
        assert psi_of_token_length(scores) < 0.1, "no shift"
    finally:
        gateway.launcher.stop_all()


def test_another_worker_judges_once_the_judge_exits(tmp_path, tiny_model, triton):
    gateway = start_gateway(tmp_path, tiny_model, triton, workers=2, env=JUDGE_EVERY)
    try:
        send(gateway, short(500, seed=11))
        lock = tmp_path / "prometheus-api" / JUDGE_LOCK
        wait_for(lambda: (tmp_path / "prometheus-api" / REFERENCES_FILE).is_file(), 30, "reference taken")
        first = judge_is_a_worker(gateway, tmp_path)
        os.kill(first, signal.SIGTERM)  # gunicorn starts a new worker in its place
        wait_for(lambda: lock.read_text().strip() not in ("", str(first)), 30, "new judge")
        second = judge_is_a_worker(gateway, tmp_path)
        send(gateway, long(400, seed=12))
        scores = wait_for(lambda: drift_scores(gateway), 30, "drift score from the new judge")
        print(f"\njudge {first} exited, {second} judges: {sorted((s['feature'], s['method'], v) for s, v in scores)}")
        one_score_per_series(scores)
        assert psi_of_token_length(scores) > 0.25, "the kept reference of short texts"
    finally:
        gateway.launcher.stop_all()
