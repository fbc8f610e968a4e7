"""Raw ONNX Runtime sequences per second of a variant beside its source, in interleaved rounds (no server):
`python -m services.optimize.speed build/model build/model-int8 [--rounds 5] [--batch 16] [--threads 2]`.

Two figures per model and round: sequences per second of wall time with `--threads` intra-op threads (what a server
gets, and what other processes on the machine disturb), and sequences per CPU second with one thread on the calling
thread (`time.thread_time`: what the model costs, which a busy machine disturbs much less). The texts are the first
batches of the held-out set; each round runs every model over the same batches, one model after the other."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.onnx_runner import OnnxModel
from services.common.tokenization import TextTokenizer
from services.optimize.heldout import heldout_texts


def rates(model: OnnxModel, batches: list[dict]) -> tuple[float, float]:
    """(sequences per wall second, per CPU second of this thread) over `batches`."""
    rows = sum(len(b[model.input_names[0]]) for b in batches)
    wall, cpu = time.perf_counter(), time.thread_time()
    for batch in batches:
        model.run(batch)
    return rows / (time.perf_counter() - wall), rows / (time.thread_time() - cpu)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="model directories; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    manifests = [Manifest.load(d) for d in args.models]
    tokenizer = TextTokenizer(args.models[0] / TOKENIZER_FILE, manifests[0].max_seq_length)
    texts = heldout_texts()[: args.batch * args.batches]
    names = manifests[0].input_names
    batches = [tokenizer.encode(texts[i : i + args.batch]).tensors(names) for i in range(0, len(texts), args.batch)]
    wide = [OnnxModel(d, m, threads=args.threads) for d, m in zip(args.models, manifests, strict=True)]
    single = [OnnxModel(d, m, threads=1, spin=False) for d, m in zip(args.models, manifests, strict=True)]
    for model in wide + single:
        rates(model, batches[:2])  # warm up
    wall: list[list[float]] = [[] for _ in args.models]
    cpu: list[list[float]] = [[] for _ in args.models]
    for _ in range(args.rounds):
        for i in range(len(args.models)):
            wall[i].append(rates(wide[i], batches)[0])
            cpu[i].append(rates(single[i], batches)[1])
    base_wall, base_cpu = statistics.median(wall[0]), statistics.median(cpu[0])
    print(f"batch {args.batch}, {len(texts)} held-out texts, {args.rounds} interleaved rounds (medians; each round)")
    for i, directory in enumerate(args.models):
        w, c = statistics.median(wall[i]), statistics.median(cpu[i])
        print(
            f"{directory}: {w:.0f} seq/s with {args.threads} threads ({w / base_wall:.2f}x; "
            f"{' '.join(f'{x:.0f}' for x in wall[i])}), {c:.0f} seq per CPU second with 1 thread "
            f"({c / base_cpu:.2f}x; {' '.join(f'{x:.0f}' for x in cpu[i])})"
        )


if __name__ == "__main__":
    main()
