"""STACK=fastapi with DEVICE=sim: every answer says it came from the simulated accelerator, its vectors are the
device's (unit norm, the model's width, the same in every worker), and the stack's two workers queue for one
device."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from services.common.contract import Manifest
from tests.support.servers import start_http_stack
from tests.support.sim import (
    TEXT,
    assert_unit_norm,
    concurrently,
    expected_vectors,
    modelled_seconds,
    sim_env,
    token_width,
)


@pytest.fixture(scope="module")
def sim_fastapi(tmp_path_factory, tiny_model):
    run = tmp_path_factory.mktemp("fastapi-sim")
    server = start_http_stack(run, tiny_model, workers=2, env=sim_env("SERVING_", run / "sim-device.lock"))
    yield server
    server.launcher.stop_all()


def test_every_answer_comes_from_the_simulated_device(sim_fastapi, tiny_model):
    manifest = Manifest.load(tiny_model)
    v2_body = {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [TEXT]}]}
    with sim_fastapi.client() as client:
        answers = [
            client.post("/serve/minilm", json={"text": TEXT}),
            client.post("/v1/embeddings", json={"model": manifest.name, "input": [TEXT]}),
            client.post("/v2/models/minilm/infer", json=v2_body),
        ]
        ready = client.get("/health/ready").json()
        metadata = client.get("/v2/models/minilm").json()
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [a.headers["x-device"] for a in answers] == ["sim", "sim", "sim"]
    assert ready["device"] == "sim" and metadata["parameters"] == {"device": "sim"}
    vectors = [
        np.array(answers[0].json()["embedding"]),
        np.array(answers[1].json()["data"][0]["embedding"]),
        np.array(answers[2].json()["outputs"][0]["data"]),
    ]
    expected = expected_vectors(tiny_model, [TEXT])[0]
    for vector in vectors:
        assert_unit_norm(vector, manifest.output_dim)
        assert np.abs(vector - expected).max() <= 1e-6


def test_two_workers_queue_for_one_device(sim_fastapi, tiny_model):
    """Six requests at once are six batches of one text (no coalescing here), one after the other on the device
    whichever worker takes them: as long as the device's time for all six, not half of it."""
    width = token_width(tiny_model)

    def post(_):
        return httpx.post(f"{sim_fastapi.url}/serve/minilm", json={"text": TEXT}, timeout=30).status_code

    codes, wall = concurrently(6, post)
    modelled = modelled_seconds(6, 6, width)
    assert codes == [200] * 6
    assert modelled * 0.95 <= wall <= modelled * 1.5 + 0.5, (wall, modelled)
