"""Where a stack's encoder runs (and on which ONNX Runtime providers), and the timing model of the simulated
accelerator (`DEVICE=sim`), without numpy or onnxruntime so that settings and the CLI can name them cheaply; the
stand-in itself is `services.common.sim_device`.

A batch of `rows` texts padded to `width` tokens takes `fixed_us + per_token_us * rows * width` microseconds of
device time: padded tokens, because a GPU runs its kernels over the padded tensor. The defaults come from a published
Tesla T4 measurement of this architecture (MiniLM-L6-H384 on ONNX Runtime); how they were derived is in
docs/decisions/sim-device.md.
"""

from __future__ import annotations

import os

from services.common.errors import ConfigurationError

DEVICES = ("cpu", "cuda", "sim")
"""cpu: ONNX Runtime on the CPU; cuda: ONNX Runtime's CUDA provider on an NVIDIA GPU; sim: the stand-in for one
accelerator."""
CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
NVIDIA_DEVICE = "/dev/nvidia0"
"""The first NVIDIA GPU's device file, present where the driver sees a GPU (and inside a container given one)."""
DEFAULT_FIXED_US = 642.0
"""Device time of every batch, whatever its size (kernel launches, transfers): `a`."""
DEFAULT_PER_TOKEN_US = 4.25
"""Device time of every padded token of a batch: `b`."""
HEADER = "x-device"
"""The response header that names the device an answer was computed on: cpu, gpu, sim."""


def device_seconds(rows: int, width: int, fixed_us: float, per_token_us: float) -> float:
    """Device time of one batch of `rows` texts padded to `width` tokens."""
    return (fixed_us + per_token_us * rows * width) / 1e6


def gpu_present() -> bool:
    """Whether this host (or container) has an NVIDIA GPU device."""
    return os.path.exists(NVIDIA_DEVICE)


def cuda_missing(available: list[str], gpu: bool) -> str | None:
    """What running on CUDA lacks here, each missing piece named (None when nothing is): `available`: ONNX Runtime's
    providers (`onnxruntime.get_available_providers()`); `gpu`: `gpu_present()`."""
    missing = []
    if not gpu:
        missing.append(f"an NVIDIA GPU (there is no {NVIDIA_DEVICE})")
    if CUDA_PROVIDER not in available:
        missing.append(
            f"ONNX Runtime's {CUDA_PROVIDER} (this onnxruntime has {', '.join(available)}: install onnxruntime-gpu)"
        )
    return " and ".join(missing) or None


def device_refusal(device: str, available: list[str], gpu: bool) -> str | None:
    """Why `device` cannot run here, as the sentence a user sees; None when it can."""
    if device not in DEVICES:
        return f"DEVICE must be one of {', '.join(DEVICES)}, not '{device}'"
    if device == "cuda" and (missing := cuda_missing(available, gpu)):
        return f"DEVICE=cuda needs {missing}; use DEVICE=cpu, or DEVICE=sim to simulate an accelerator"
    return None


def providers_for(device: str, available: list[str], gpu: bool) -> list[str]:
    """The ONNX Runtime providers a model runs on for `device`, most preferred first: cpu -> the CPU provider;
    cuda -> the CUDA provider, then the CPU one for the operators CUDA lacks. ConfigurationError (`device_refusal`)
    for any other device, and for cuda where it cannot run: never a silent fall back to the CPU."""
    if device == "cpu":
        return [CPU_PROVIDER]
    if device != "cuda":
        raise ConfigurationError(f"ONNX Runtime runs on cpu or cuda, not '{device}'")
    if refusal := device_refusal(device, available, gpu):
        raise ConfigurationError(refusal)
    return [CUDA_PROVIDER, CPU_PROVIDER]
