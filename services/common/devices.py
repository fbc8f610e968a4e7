"""Where a stack's encoder runs, and the timing model of the simulated accelerator (`DEVICE=sim`), without numpy so
that settings and the CLI can name them cheaply; the stand-in itself is `services.common.sim_device`.

A batch of `rows` texts padded to `width` tokens takes `fixed_us + per_token_us * rows * width` microseconds of
device time: padded tokens, because a GPU runs its kernels over the padded tensor. The defaults come from a published
Tesla T4 measurement of this architecture (MiniLM-L6-H384 on ONNX Runtime); how they were derived is in
docs/decisions/sim-device.md.
"""

from __future__ import annotations

DEVICES = ("cpu", "sim")
"""cpu: ONNX Runtime on the CPU; sim: the stand-in for one accelerator."""
DEFAULT_FIXED_US = 642.0
"""Device time of every batch, whatever its size (kernel launches, transfers): `a`."""
DEFAULT_PER_TOKEN_US = 4.25
"""Device time of every padded token of a batch: `b`."""
HEADER = "x-device"
"""The response header that names the device an answer was computed on: cpu, gpu, sim."""


def device_seconds(rows: int, width: int, fixed_us: float, per_token_us: float) -> float:
    """Device time of one batch of `rows` texts padded to `width` tokens."""
    return (fixed_us + per_token_us * rows * width) / 1e6
