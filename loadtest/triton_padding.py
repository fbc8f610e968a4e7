"""Benchmark: how should variable-length inputs batch in Triton, ragged (pad within the batch) or length buckets?

Starts the real Triton (STACK=triton, batching on) once per padding mode, drives the ensemble over gRPC with a
closed loop of mixed-length sentences, and prints throughput and latency side by side, with raw ONNX Runtime on the
same texts (batch 32, no server) as the ceiling measured in the same run.

    .venv/bin/python -m loadtest.triton_padding --seconds 15 --concurrency 32
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import numpy as np
import typer

from loadtest.ceiling import raw_onnxruntime
from loadtest.sentences import mixed
from loadtest.stackrun import running_stack


async def closed_loop(grpc_url: str, texts: list[str], seconds: float, concurrency: int) -> tuple[int, list[float]]:
    import tritonclient.grpc.aio as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        i = offset
        while time.perf_counter() < deadline:
            tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[texts[i % len(texts)].encode()]], dtype=np.object_))
            start = time.perf_counter()
            await client.infer("ensemble", [tensor])
            latencies.append(time.perf_counter() - start)
            i += concurrency

    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    await client.close()
    return len(latencies), latencies


def main(
    model_dir: Path = typer.Option(Path("build/model")),
    seconds: float = typer.Option(15.0),
    concurrency: int = typer.Option(32),
) -> None:
    texts = mixed(2000)
    rows = [("raw onnxruntime, batch 32", raw_onnxruntime(model_dir, texts, seconds, batches=(32,))[32], None, None)]
    for padding in ("ragged", "bucket"):
        with running_stack("triton", model_dir, padding=padding) as running:
            url = f"127.0.0.1:{running.options.triton_ports.grpc}"
            asyncio.run(closed_loop(url, texts, 3, concurrency))  # warm-up
            count, latencies = asyncio.run(closed_loop(url, texts, seconds, concurrency))
        p50 = statistics.median(latencies) * 1000
        p99 = float(np.percentile(latencies, 99)) * 1000
        rows.append((f"triton ensemble, batching on, {padding}", count / seconds, p50, p99))
    ceiling = rows[0][1]
    print(f"{'configuration':42} {'req/s':>8} {'x raw':>6} {'p50 ms':>8} {'p99 ms':>8}")
    for name, rate, p50, p99 in rows:
        p50s = f"{p50:8.1f}" if p50 is not None else f"{'-':>8}"
        p99s = f"{p99:8.1f}" if p99 is not None else f"{'-':>8}"
        print(f"{name:42} {rate:8.1f} {rate / ceiling:6.2f} {p50s} {p99s}")


if __name__ == "__main__":
    typer.run(main)
