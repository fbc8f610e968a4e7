"""The simulated accelerator's parts without a server: its timing model, its one-device serialization (threads and
processes), its deterministic embeddings, and how a stack's configuration names it."""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as pb

from services.common.contract import Manifest
from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US, device_seconds
from services.common.errors import ConfigurationError
from services.common.sim_device import DeviceQueue, Embedder, SimDevice, wait_until
from services.triton.grpc_client import config_device
from services.triton.repository import RenderOptions, render_configs
from tests.support.models import unit_model_dir


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Manifest:
    return Manifest.load(unit_model_dir(tmp_path_factory.mktemp("sim"), "embedding"))


def feeds(ids: list[list[int]], width: int | None = None) -> dict[str, np.ndarray]:
    """Rows of token ids padded with 0 on the right to `width` (default: the longest), as a tokenizer pads them."""
    width = width or max(map(len, ids))
    input_ids = np.zeros((len(ids), width), np.int64)
    mask = np.zeros_like(input_ids)
    for row, tokens in enumerate(ids):
        input_ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}


def test_device_time_is_fixed_plus_per_padded_token():
    assert device_seconds(1, 16, 642.0, 4.25) == pytest.approx((642 + 4.25 * 16) / 1e6)
    assert device_seconds(16, 384, 642.0, 4.25) == pytest.approx((642 + 4.25 * 16 * 384) / 1e6)
    # the published T4 points the defaults are fitted to (docs/decisions/sim-device.md): 0.71 ms and 26.75 ms
    assert device_seconds(1, 16, DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US) == pytest.approx(0.71e-3, rel=0.01)
    assert device_seconds(16, 384, DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US) == pytest.approx(26.75e-3, rel=0.01)


def test_embeddings_are_unit_norm_of_the_manifests_width_and_deterministic(manifest):
    device = SimDevice(manifest, fixed_us=0, per_token_us=0)
    texts = [[101, 7, 8, 102], [101, 9, 102], [101, 7, 8, 9, 10, 11, 102]]
    out = device.run(feeds(texts))
    assert out.shape == (3, manifest.output_dim) and out.dtype == manifest.output.numpy_dtype
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    again = SimDevice(manifest, fixed_us=0, per_token_us=0).run(feeds(texts))  # another process's device
    assert np.array_equal(out, again)
    assert len({row.tobytes() for row in out}) == 3  # different texts, different vectors


def test_an_embedding_does_not_depend_on_its_batch_or_padding():
    embed = Embedder(384)
    alone = embed(**_ids_mask(feeds([[101, 5, 6, 102]])))
    batched = embed(**_ids_mask(feeds([[101, 1, 2, 3, 4, 5, 6, 7, 102], [101, 5, 6, 102]], width=40)))
    assert np.allclose(alone[0], batched[1], atol=1e-7)
    assert not np.allclose(embed(**_ids_mask(feeds([[101, 6, 5, 102]])))[0], alone[0])  # order matters


def _ids_mask(f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"input_ids": f["input_ids"], "attention_mask": f["attention_mask"]}


def test_a_batch_waits_its_device_time_without_computing(manifest):
    device = SimDevice(manifest, fixed_us=20_000, per_token_us=100)  # 20 ms + 4 x 10 x 0.1 ms = 24 ms
    batch = feeds([[1] * 10] * 4)
    device.run(batch)  # numpy's first calls
    wall, cpu = time.perf_counter(), time.process_time()
    device.run(batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert 0.024 <= wall < 0.024 * 3
    assert cpu < wall / 3  # waiting, not computing: the cores stay free


def test_a_stale_free_time_from_a_previous_boot_is_ignored(tmp_path):
    queue = DeviceQueue(tmp_path / "dev.lock")
    queue._write(time.monotonic() + 3600)
    start, end = queue.reserve(0.01)
    assert start <= time.monotonic() and end - start == pytest.approx(0.01)


def test_threads_share_one_device_one_batch_at_a_time(manifest):
    device = SimDevice(manifest, fixed_us=30_000, per_token_us=0)
    batch = feeds([[1, 2, 3]])
    threads = [threading.Thread(target=device.run, args=(batch,)) for _ in range(4)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.perf_counter() - start >= 4 * 0.030  # serialized: 120 ms, not 30


def _hold(path: str, seconds: float, start, spans) -> None:
    queue = DeviceQueue(path)
    start.wait(10)  # every process asks for the device at once
    begin, end = queue.reserve(seconds)
    wait_until(end)
    spans.put((begin, end, time.monotonic()))


@pytest.mark.parametrize("shared", [True, False])
def test_processes_share_a_device_through_its_lock_file(tmp_path, shared):
    """Triton's encoder instances and gunicorn's workers are processes: with the same lock file their batches never
    overlap; each with a file of its own, they do (three devices)."""
    context = multiprocessing.get_context("fork")
    start, spans = context.Barrier(3), context.Queue()
    paths = [tmp_path / "device.lock"] * 3 if shared else [tmp_path / f"device{i}.lock" for i in range(3)]
    procs = [context.Process(target=_hold, args=(str(path), 0.3, start, spans)) for path in paths]
    for proc in procs:
        proc.start()
    held = sorted(spans.get(timeout=30) for _ in procs)
    for proc in procs:
        proc.join(10)
    overlaps = sum(held[i + 1][0] < held[i][1] for i in range(len(held) - 1))
    assert overlaps == (0 if shared else 2)
    assert all(woke >= end for _, end, woke in held)  # each waited for its own batch's end
    assert held[-1][1] - held[0][0] == pytest.approx(0.9 if shared else 0.3, abs=0.1)


def test_the_settings_come_from_triton_config_parameters(manifest, tmp_path):
    lock = tmp_path / "dev.lock"
    params = {"device": "sim", "sim_fixed_us": "100.0", "sim_per_token_us": "2.5", "sim_lock_file": str(lock)}
    device = SimDevice.from_parameters(manifest, params)
    assert (device.fixed_us, device.per_token_us) == (100.0, 2.5) and lock.exists()
    defaults = SimDevice.from_parameters(manifest, {"device": "sim"})
    assert (defaults.fixed_us, defaults.per_token_us) == (DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US)
    with pytest.raises(ValueError, match="0 or more"):
        SimDevice(manifest, fixed_us=-1)


def test_the_encoder_is_rendered_on_the_simulated_device(manifest, tmp_path):
    options = RenderOptions(device="sim", sim_fixed_us=500, sim_per_token_us=3, sim_lock_file=str(tmp_path / "l"))
    encoder = render_configs(manifest, options)["encoder"]
    params = {key: value.string_value for key, value in encoder.parameters.items()}
    assert params["device"] == "sim" and float(params["sim_fixed_us"]) == 500 and float(params["sim_per_token_us"]) == 3
    assert params["sim_lock_file"] == str(tmp_path / "l")
    assert config_device(encoder) == "sim"
    assert "device" not in render_configs(manifest, RenderOptions())["encoder"].parameters
    with pytest.raises(ConfigurationError, match="local target only"):
        RenderOptions(target="container", device="sim")
    with pytest.raises(ConfigurationError, match="DEVICE"):
        RenderOptions(device="tpu")


def test_the_device_a_triton_config_declares():
    config = pb.ModelConfig(name="encoder")
    config.instance_group.add(kind=pb.ModelInstanceGroup.KIND_CPU)
    assert config_device(config) == "cpu"
    config.parameters["device"].string_value = "quantum\r\nx-evil: 1"  # not trusted: not echoed into a header
    assert config_device(config) == "cpu"
    config.instance_group.add(kind=pb.ModelInstanceGroup.KIND_GPU)
    assert config_device(config) == "gpu"
    config.parameters["device"].string_value = "sim"
    assert config_device(config) == "sim"
