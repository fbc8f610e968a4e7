"""STACK=triton with DEVICE=sim: the encoder model is the simulated accelerator (its config says so: Triton's own
HTTP answers carry no header of ours), the ensemble returns the device's vectors, and two encoder instances share
one device while Triton batches concurrent requests."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from services.common.contract import Manifest
from services.triton.repository import RenderOptions
from tests.support.servers import start_triton, triton_metric
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


def infer(url: str, texts: list[str]) -> httpx.Response:
    body = {"inputs": [{"name": "TEXT", "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}]}
    return httpx.post(f"{url}/v2/models/ensemble/infer", json=body, timeout=30)


@pytest.fixture(scope="module")
def sim_triton(tmp_path_factory, tiny_model):
    run = tmp_path_factory.mktemp("triton-sim")
    options = RenderOptions(
        batching=True,
        encoder_instances=2,
        device="sim",
        sim_fixed_us=FIXED_US,
        sim_per_token_us=PER_TOKEN_US,
        sim_lock_file=str(run / "sim-device.lock"),
    )
    server = start_triton(run, tiny_model, options)
    yield server
    server.stop()


def test_the_ensemble_answers_from_the_simulated_device(sim_triton, tiny_model):
    manifest = Manifest.load(tiny_model)
    config = httpx.get(f"{sim_triton.http_url}/v2/models/encoder/config", timeout=10).json()
    assert config["parameters"]["device"]["string_value"] == "sim"
    answers = [infer(sim_triton.http_url, [TEXT, "another one"]) for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200], answers[0].text
    first, second = (np.array(a.json()["outputs"][0]["data"]).reshape(2, -1) for a in answers)
    assert_unit_norm(first, manifest.output_dim)
    assert np.array_equal(first, second)
    assert np.abs(first - expected_vectors(tiny_model, [TEXT, "another one"])).max() <= 1e-6


def test_concurrent_requests_take_the_device_time_of_the_batches_triton_formed(sim_triton, tiny_model):
    """Eight requests at once: Triton batches them, and its two encoder instances (two stub processes) wait on one
    device, so the whole takes the device time of every batch formed, one after the other."""
    before = [triton_metric(sim_triton, name, "encoder") for name in ("nv_inference_exec_count", "nv_inference_count")]
    answers, wall = concurrently(8, lambda _: infer(sim_triton.http_url, [TEXT]).status_code)
    after = [triton_metric(sim_triton, name, "encoder") for name in ("nv_inference_exec_count", "nv_inference_count")]
    batches, rows = int(after[0] - before[0]), int(after[1] - before[1])
    modelled = modelled_seconds(batches, rows, token_width(tiny_model))
    assert answers == [200] * 8 and rows == 8
    assert batches < 8  # batched: eight requests alone would take eight fixed costs
    assert modelled * 0.95 <= wall <= modelled * 1.5 + 0.5, (wall, modelled, batches)
