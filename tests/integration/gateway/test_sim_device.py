"""STACK=clearml with DEVICE=sim: Triton's encoder is the simulated accelerator, and the gateway says so on every
answer (it reads the device from the Triton model's config); the vectors are the device's, and concurrent requests,
coalesced by the workers and batched by Triton, take the device time of the batches formed."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from services.common.contract import Manifest
from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_triton, triton_metric
from tests.support.sim import (
    FIXED_US,
    PER_TOKEN_US,
    TEXT,
    assert_unit_norm,
    concurrently,
    expected_vectors,
    modelled_seconds,
    token_width,
)


@pytest.fixture(scope="module")
def sim_stack(tmp_path_factory, tiny_model):
    run = tmp_path_factory.mktemp("gateway-sim")
    options = RenderOptions(
        batching=True,
        max_queue_delay_us=0,
        device="sim",
        sim_fixed_us=FIXED_US,
        sim_per_token_us=PER_TOKEN_US,
        sim_lock_file=str(run / "sim-device.lock"),
    )
    triton = start_triton(run / "triton", tiny_model, options, models=("encoder",))
    gateway = start_gateway(run / "gateway", tiny_model, triton)
    yield triton, gateway
    gateway.launcher.stop_all()
    triton.stop()


def test_every_answer_says_the_simulated_device(sim_stack, tiny_model):
    _, gateway = sim_stack
    manifest = Manifest.load(tiny_model)
    v2_body = {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [TEXT]}]}
    with gateway.client() as client:
        answers = [
            client.post("/serve/minilm", json={"text": TEXT}),
            client.post("/v1/embeddings", json={"model": manifest.name, "input": [TEXT]}),
            client.post("/v2/models/minilm/infer", json=v2_body),
        ]
        ready = client.get("/health/ready").json()
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [a.headers["x-device"] for a in answers] == ["sim", "sim", "sim"]
    assert ready["device"] == "sim"
    expected = expected_vectors(tiny_model, [TEXT])[0]
    for vector in (
        np.array(answers[0].json()["embedding"]),
        np.array(answers[1].json()["data"][0]["embedding"]),
        np.array(answers[2].json()["outputs"][0]["data"]),
    ):
        assert_unit_norm(vector, manifest.output_dim)
        assert np.abs(vector - expected).max() <= 1e-6


def test_concurrent_requests_take_the_device_time_of_the_batches_formed(sim_stack, tiny_model):
    triton, gateway = sim_stack
    names = ("nv_inference_exec_count", "nv_inference_count")
    before = [triton_metric(triton, name, "encoder") for name in names]

    def post(_):
        return httpx.post(f"{gateway.url}/serve/minilm", json={"text": TEXT}, timeout=30).status_code

    codes, wall = concurrently(8, post)
    after = [triton_metric(triton, name, "encoder") for name in names]
    batches, rows = int(after[0] - before[0]), int(after[1] - before[1])
    modelled = modelled_seconds(batches, rows, token_width(tiny_model))
    assert codes == [200] * 8 and rows == 8
    assert batches < 8  # coalesced by the workers, batched by Triton
    assert modelled * 0.95 <= wall <= modelled * 1.5 + 0.5, (wall, modelled, batches)
