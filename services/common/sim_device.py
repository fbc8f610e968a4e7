"""A stand-in for one accelerator running the encoder (`DEVICE=sim`): the CPU does what it does in front of a real
GPU (tokenizing, HTTP, batching, IPC), and the model's pass is time spent waiting, not computing.

- Timing: `services.common.devices.device_seconds` of the batch's rows and padded width.
- Serialization: one device, one batch at a time, in the order they come, for every thread and process that shares
  its lock file (Triton's encoder instances are stub processes of their own, a FastAPI stack's workers are gunicorn
  processes): `DeviceQueue`. The wait is a sleep: the cores stay free for the rest of the stack.
- Output: deterministic unit-norm vectors of the manifest's output width, the same for the same token ids whatever
  the batch or its padding, so answers can be checked like a real model's.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from services.common.contract import Manifest
from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US, device_seconds

_TABLE_ROWS = 4096
_PRIME = np.uint64(0x100000001B3)
_MIX = (np.uint64(30), np.uint64(0xBF58476D1CE4E5B9), np.uint64(27), np.uint64(0x94D049BB133111EB), np.uint64(31))


class DeviceQueue:
    """One device's timeline: each batch reserves the device from when it is free (or now, if idle) for its time, in
    the order batches ask, across the threads of this process and, with `path`, every process that opens the same
    file (`flock` around reading and writing when the device is next free, kept in the file). A reservation holds
    the lock for microseconds; the wait for the batch's end happens outside it, so a waiter woken late by a busy CPU
    delays its own answer, not the device (as a GPU runs its queued work while its host thread is descheduled)."""

    STALE = 60.0
    """A free time further ahead than this many seconds is a previous boot's (the monotonic clock restarts)."""

    def __init__(self, path: Path | None = None):
        self._threads = threading.Lock()
        self._free_at = 0.0
        self._fd: int | None = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def reserve(self, seconds: float) -> tuple[float, float]:
        """(start, end) of `seconds` of device time, on `time.monotonic`'s clock (the same in every process)."""
        with self._threads, self._file_locked():
            now = time.monotonic()
            free_at = self._read()
            start = max(now, free_at if free_at <= now + self.STALE else now)
            self._write(start + seconds)
        return start, start + seconds

    @contextmanager
    def _file_locked(self) -> Iterator[None]:
        if self._fd is None:
            yield
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _read(self) -> float:
        if self._fd is None:
            return self._free_at
        raw = os.pread(self._fd, 8, 0)
        return struct.unpack("d", raw)[0] if len(raw) == 8 else 0.0

    def _write(self, free_at: float) -> None:
        self._free_at = free_at
        if self._fd is not None:
            os.pwrite(self._fd, struct.pack("d", free_at), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Embedder:
    """Token ids -> unit-norm vectors of `width`: a 64-bit hash of each row's unpadded ids picks and weighs three rows
    of a fixed random table, vectorized over the batch."""

    def __init__(self, width: int, max_length: int = 512):
        self.table = np.random.default_rng(0).standard_normal((_TABLE_ROWS, width), dtype=np.float32)
        self.powers = np.cumprod(np.full(max_length, _PRIME, dtype=np.uint64))

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
        ids = np.asarray(input_ids).astype(np.uint64) + np.uint64(1)
        if attention_mask is not None:
            ids *= np.asarray(attention_mask).astype(np.uint64)  # padding adds nothing to the hash
        width = ids.shape[1]
        powers = self.powers[:width] if width <= len(self.powers) else np.cumprod(np.full(width, _PRIME))
        hashed = _mix((ids * powers).sum(axis=1, dtype=np.uint64))
        rows = np.uint64(_TABLE_ROWS)
        picks = [(hashed >> np.uint64(shift)) % rows for shift in (0, 21, 42)]
        vectors = self.table[picks[0].astype(np.intp)].copy()
        vectors += 0.7 * self.table[picks[1].astype(np.intp)] + 0.5 * self.table[picks[2].astype(np.intp)]
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every bit of the sum reaches every bit of the hash."""
    s1, m1, s2, m2, s3 = _MIX
    h = (h ^ (h >> s1)) * m1
    h = (h ^ (h >> s2)) * m2
    return h ^ (h >> s3)


class SimDevice:
    """The encoder on the simulated accelerator: `run` has `OnnxModel.run`'s contract (named inputs in, the contract
    output out), so a stack swaps one for the other where it runs its model."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        fixed_us: float = DEFAULT_FIXED_US,
        per_token_us: float = DEFAULT_PER_TOKEN_US,
        lock_file: Path | None = None,
    ):
        if fixed_us < 0 or per_token_us < 0:
            raise ValueError(f"device times are 0 or more, got fixed_us={fixed_us}, per_token_us={per_token_us}")
        self.manifest = manifest
        self.fixed_us = fixed_us
        self.per_token_us = per_token_us
        self.queue = DeviceQueue(lock_file)
        self.embed = Embedder(manifest.output_dim, manifest.max_seq_length)
        self.dtype = manifest.output.numpy_dtype
        self.ids_name = manifest.input_names[0]
        self.mask_name = "attention_mask" if "attention_mask" in manifest.input_names else None

    @classmethod
    def from_parameters(cls, manifest: Manifest, parameters: dict[str, str]) -> SimDevice:
        """From a Triton model config's `parameters` (`sim_fixed_us`, `sim_per_token_us`, `sim_lock_file`)."""
        return cls(
            manifest,
            fixed_us=float(parameters.get("sim_fixed_us", DEFAULT_FIXED_US)),
            per_token_us=float(parameters.get("sim_per_token_us", DEFAULT_PER_TOKEN_US)),
            lock_file=Path(parameters["sim_lock_file"]) if parameters.get("sim_lock_file") else None,
        )

    def seconds(self, rows: int, width: int) -> float:
        return device_seconds(rows, width, self.fixed_us, self.per_token_us)

    def run(self, feeds: dict[str, np.ndarray], options: object = None) -> np.ndarray:
        """The batch's vectors, once the device has spent the batch's time on it. `options` (ONNX Runtime's run
        options) is accepted and unused: a run lasts milliseconds."""
        ids = feeds[self.ids_name]
        out: np.ndarray = self.embed(ids, feeds.get(self.mask_name) if self.mask_name else None).astype(
            self.dtype, copy=False
        )
        rows, width = ids.shape
        _, end = self.queue.reserve(self.seconds(rows, width))
        wait_until(end)
        return out

    def close(self) -> None:
        self.queue.close()


def wait_until(deadline: float) -> None:
    """Sleep to `deadline` (time.monotonic), never spinning: the wait costs no CPU."""
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(left)
