"""The reference every benchmark reports against: raw ONNX Runtime (no server) at each batch size, on the same
texts, threads and machine, measured in the same run: its best rate is the ceiling, its CPU per sequence at the batch
a server formed is what that server's model costs (the efficiency column). With `device="sim"` the model is the
simulated accelerator (`services.common.sim_device`), alone: the rate a stack would reach if nothing but the device
and tokenizing limited it."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US
from services.common.onnx_runner import OnnxModel, default_threads
from services.common.sim_device import SimDevice
from services.common.tokenization import TextTokenizer

BATCHES = (1, 2, 4, 8, 16, 32, 64)


def raw_onnxruntime(
    model_dir: Path,
    texts: list[str],
    seconds: float,
    batches: tuple[int, ...] = BATCHES,
    model: OnnxModel | SimDevice | None = None,
) -> dict[int, tuple[float, float]]:
    """(sequences per second, microseconds of CPU per sequence) at each batch size, tokenization included as a
    server would do it; CPU is every thread of this process, ONNX Runtime's included. `model`: another model with
    `OnnxModel.run`'s contract (the simulated device)."""
    manifest = Manifest.load(model_dir)
    # Not spinning: spinning threads count as CPU, and with anything else on the cores they cost the model itself
    # time (docs/decisions/measured-defaults.md); Triton's encoder does not spin by default either.
    model = model or OnnxModel(model_dir, manifest, threads=default_threads(), spin=False)
    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    found = {}
    share = seconds / len(batches)
    for batch in batches:
        chunks = [texts[i : i + batch] for i in range(0, max(1, len(texts) - batch + 1), batch)] or [texts[:batch]]
        # A new session is slow on each new input shape for a while (its memory plans): a cold first second had
        # put batch 8 at 5468 us of CPU a sequence against 3904 warm. The first third of each share warms up.
        _run_for(model, tokenizer, manifest.input_names, chunks, share / 3)
        done, wall, cpu = _run_for(model, tokenizer, manifest.input_names, chunks, share * 2 / 3)
        found[batch] = (done / wall, cpu / done * 1e6)
    return found


def _run_for(
    model: OnnxModel | SimDevice, tokenizer: TextTokenizer, names: list[str], chunks: list[list[str]], limit: float
) -> tuple[int, float, float]:
    """Tokenize and run `chunks` in turn for `limit` seconds: (sequences, wall seconds, CPU seconds)."""
    done, i, cpu, start = 0, 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - start < limit:
        chunk = chunks[i % len(chunks)]
        model.run(tokenizer.encode(chunk).tensors(names))
        done += len(chunk)
        i += 1
    return done, time.perf_counter() - start, time.process_time() - cpu


def ceiling(
    model_dir: Path,
    texts: list[str],
    seconds: float,
    device: str = "cpu",
    sim_fixed_us: float = DEFAULT_FIXED_US,
    sim_per_token_us: float = DEFAULT_PER_TOKEN_US,
) -> dict:
    """The reference on `device`: its rate and CPU per sequence at every batch size, the best rate and batch."""
    model = None
    if device == "sim":
        model = SimDevice(Manifest.load(model_dir), fixed_us=sim_fixed_us, per_token_us=sim_per_token_us)
    measured = raw_onnxruntime(model_dir, texts, seconds, model=model)
    rates = {batch: rate for batch, (rate, _) in measured.items()}
    best = max(rates, key=lambda batch: rates[batch])
    found = {
        "rate": rates[best],
        "batch": best,
        "by_batch": rates,
        "cpu_us_per_sequence": {str(batch): cpu for batch, (_, cpu) in measured.items()},
        "device": device,
    }
    if device == "sim":
        found["sim"] = {"fixed_us": sim_fixed_us, "per_token_us": sim_per_token_us}
    return found


def ceiling_name(reference: dict) -> str:
    """What the reference measured, for reports: raw ONNX Runtime or the simulated device."""
    if reference.get("device") == "sim":
        sim = reference["sim"]
        return f"simulated device ceiling ({sim['fixed_us']:g} us + {sim['per_token_us']:g} us a padded token)"
    return "raw ONNX Runtime ceiling"


def model_cpu_at(per_batch: dict[str, float], batch: float) -> float | None:
    """The model's CPU per sequence at a (mean, fractional) batch size: interpolated between the measured batch
    sizes on a log scale; None outside them."""
    if not per_batch:
        return None
    sizes = sorted(int(b) for b in per_batch)
    if not sizes[0] <= batch <= sizes[-1]:
        return per_batch.get(str(round(batch)))
    return float(np.interp(math.log2(batch), [math.log2(s) for s in sizes], [per_batch[str(s)] for s in sizes]))
