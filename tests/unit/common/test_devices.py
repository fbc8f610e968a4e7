"""Which ONNX Runtime providers each device takes, and `DEVICE=cuda` refused, naming what is missing, where there is
no GPU or no CUDA provider (this machine has neither: the selection is tested with the inputs a GPU host gives)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from services.common.devices import CPU_PROVIDER, CUDA_PROVIDER, cuda_missing, device_refusal, providers_for
from services.common.errors import ConfigurationError

CPU_ONLY = [CPU_PROVIDER]
WITH_CUDA = [CUDA_PROVIDER, CPU_PROVIDER]


def test_cpu_runs_on_the_cpu_provider_whatever_else_there_is():
    assert providers_for("cpu", WITH_CUDA, gpu=True) == [CPU_PROVIDER]


def test_cuda_with_a_gpu_and_the_provider_prefers_cuda_then_the_cpu():
    assert providers_for("cuda", WITH_CUDA, gpu=True) == [CUDA_PROVIDER, CPU_PROVIDER]
    assert device_refusal("cuda", WITH_CUDA, gpu=True) is None


@pytest.mark.parametrize(
    ("available", "gpu", "named", "not_named"),
    [
        (CPU_ONLY, False, ["an NVIDIA GPU", CUDA_PROVIDER, "onnxruntime-gpu"], []),
        (CPU_ONLY, True, [CUDA_PROVIDER, "onnxruntime-gpu"], ["an NVIDIA GPU"]),
        (WITH_CUDA, False, ["an NVIDIA GPU (there is no /dev/nvidia0)"], ["onnxruntime-gpu"]),
    ],
)
def test_cuda_is_refused_naming_each_missing_piece(available, gpu, named, not_named):
    with pytest.raises(ConfigurationError) as refused:
        providers_for("cuda", available, gpu)
    message = str(refused.value)
    assert message.startswith("DEVICE=cuda needs ") and "use DEVICE=cpu, or DEVICE=sim" in message
    assert all(piece in message for piece in named) and not any(piece in message for piece in not_named)
    assert cuda_missing(available, gpu) in message


def test_never_a_silent_fall_back_for_an_unknown_device():
    with pytest.raises(ConfigurationError, match="cpu or cuda, not 'tpu'"):
        providers_for("tpu", WITH_CUDA, gpu=True)
    assert device_refusal("tpu", WITH_CUDA, True) == "DEVICE must be one of cpu, cuda, sim, not 'tpu'"
    assert device_refusal("sim", CPU_ONLY, False) is None


def test_serving_up_refuses_cuda_here_before_starting_anything(tmp_path, monkeypatch):
    from services.cli import app

    monkeypatch.setenv("SERVING_RUN_DIR", str(tmp_path))
    monkeypatch.setattr("services.commands.stack.local_providers", lambda: (CPU_ONLY, False))
    result = CliRunner().invoke(app, ["up", "--stack", "fastapi", "--device", "cuda"])
    assert result.exit_code == 2
    assert "DEVICE=cuda needs an NVIDIA GPU" in result.output and CUDA_PROVIDER in result.output
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written
