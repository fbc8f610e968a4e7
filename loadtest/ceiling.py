"""The reference every benchmark reports against: raw ONNX Runtime (no server) at its best batch size, on the same
texts, threads and machine, measured in the same run."""

from __future__ import annotations

import time
from pathlib import Path

from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.onnx_runner import OnnxModel, default_threads
from services.common.tokenization import TextTokenizer


def raw_onnxruntime(model_dir: Path, texts: list[str], seconds: float, batches=(1, 8, 16, 32, 64)) -> dict[int, float]:
    """Sequences per second at each batch size (tokenization included, as a server would do it)."""
    manifest = Manifest.load(model_dir)
    model = OnnxModel(model_dir, manifest, threads=default_threads())
    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    rates = {}
    for batch in batches:
        chunks = [texts[i : i + batch] for i in range(0, max(1, len(texts) - batch + 1), batch)] or [texts[:batch]]
        model.run(tokenizer.encode(chunks[0]).tensors(manifest.input_names))
        done, start, i = 0, time.perf_counter(), 0
        while time.perf_counter() - start < seconds / len(batches):
            chunk = chunks[i % len(chunks)]
            model.run(tokenizer.encode(chunk).tensors(manifest.input_names))
            done += len(chunk)
            i += 1
        rates[batch] = done / (time.perf_counter() - start)
    return rates


def ceiling(model_dir: Path, texts: list[str], seconds: float) -> dict:
    rates = raw_onnxruntime(model_dir, texts, seconds)
    best = max(rates, key=rates.get)
    return {"rate": rates[best], "batch": best, "by_batch": rates}


def cpu_per_sequence(model_dir: Path, texts: list[str], batch: int, seconds: float = 1.5) -> float:
    """Microseconds of CPU (every thread of this process: ONNX Runtime's included) per sequence, tokenization
    included, at `batch` sequences a call: what the model itself costs at the batch size a server formed."""
    manifest = Manifest.load(model_dir)
    model = OnnxModel(model_dir, manifest, threads=default_threads())
    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    batch = max(1, batch)
    chunks = [texts[i : i + batch] for i in range(0, max(1, len(texts) - batch + 1), batch)] or [texts[:batch]]
    model.run(tokenizer.encode(chunks[0]).tensors(manifest.input_names))
    done, i = 0, 0
    cpu, start = time.process_time(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        chunk = chunks[i % len(chunks)]
        model.run(tokenizer.encode(chunk).tensors(manifest.input_names))
        done += len(chunk)
        i += 1
    return (time.process_time() - cpu) / done * 1e6
