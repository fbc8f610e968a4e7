"""Where a stack's CPU goes at one open-loop rate: every thread of every process of the stack, grouped by what it is
(the gateway's workers, Triton's front end, each Python-backend stub's Python thread and its ONNX Runtime pool, the
FastAPI workers), as microseconds of CPU per answered request, read from /proc before and after the attack; with
Triton's own metrics (per model: executions, sequences, queue and compute microseconds per request).

    PYTHONPATH=. .venv/bin/python loadtest/cpu_breakdown.py --stack clearml --model-dir build/model --rate 250

`--py-spy SECONDS` also records one gateway (or FastAPI) worker with py-spy (on PATH; needs root) into
`--out/profile-<stack>.txt`, collapsed stacks, for the share of its samples in each function. What it measured:
docs/decisions/cpu-budget.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
METRICS = (
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_success",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def process_kind(pid: int) -> str:
    """What a process of a stack is, from its command line."""
    argv = _read(Path(f"/proc/{pid}/cmdline")).split("\0")
    text = " ".join(argv)
    if "triton_python_backend_stub" in text:
        model = re.search(r"/(\w+)/\d+/model\.py", text)
        return f"stub:{model.group(1) if model else '?'}"
    if "tritonserver" in text:
        return "tritonserver"
    for name in ("gateway", "fastapi", "controller", "trace"):
        if name in text:
            return name
    return Path(argv[0]).name if argv and argv[0] else "?"


def thread_kind(process: str, comm: str, pid: int, tid: int) -> str:
    """A thread's group: a stub's main (Python) thread apart from its other threads (ONNX Runtime's pool, in the
    encoder), Triton's threads by name."""
    if process.startswith("stub:"):
        return f"{process} python thread" if tid == pid else f"{process} other threads (ONNX Runtime pool)"
    return process


def thread_cpu(pgids: list[int]) -> dict[tuple[int, int], tuple[str, float]]:
    """(pid, tid) -> (group, CPU seconds so far) for every thread of every process in the process groups."""
    found = {}
    wanted = set(pgids)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _read(stat).rsplit(")", 1)[-1].split()
        if len(fields) < 13 or int(fields[2]) not in wanted:
            continue
        pid = int(stat.parent.name)
        process = process_kind(pid)
        for task in Path(f"/proc/{pid}/task").glob("[0-9]*/stat"):
            text = _read(task)
            if not text:
                continue
            comm = text[text.index("(") + 1 : text.rindex(")")]
            tfields = text.rsplit(")", 1)[1].split()
            seconds = (int(tfields[11]) + int(tfields[12])) / TICKS
            found[(pid, int(task.parent.name))] = (thread_kind(process, comm, pid, int(task.parent.name)), seconds)
    return found


def triton_metrics(port: int) -> dict[str, dict[str, float]]:
    """model -> metric -> value, Triton's cumulative counters."""
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    found: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        model = re.search(r'model="([^"]+)"', line)
        if name in METRICS and model:
            found.setdefault(model.group(1), {})
            found[model.group(1)][name] = found[model.group(1)].get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def breakdown(stack: str, model_dir: Path, rate: float, seconds: float, py_spy: float, out: Path) -> dict:
    from loadtest import engine
    from loadtest.report import summarize
    from loadtest.stackrun import running_stack

    with running_stack(stack, model_dir) as running:
        targets = running.targets()
        engine.closed_run(targets, 3.0, 32)  # warm-up
        pgids = list(running.groups().values())
        metrics_port = running.options.triton_ports.metrics
        has_triton = stack != "fastapi"
        before_m = triton_metrics(metrics_port) if has_triton else {}
        before = thread_cpu(pgids)
        spy = None
        if py_spy:
            workers = sorted({pid for (pid, _), (kind, _) in before.items() if kind in ("gateway", "fastapi")})
            worker = workers[-1] if workers else None  # the last started: a worker, not gunicorn's master
            if worker:
                out.mkdir(parents=True, exist_ok=True)
                spy = subprocess.Popen(
                    [
                        shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "-p",
                        str(worker),
                        "-d",
                        str(int(py_spy)),
                        "-r",
                        "200",
                        "-f",
                        "raw",
                        "-o",
                        str(out / f"profile-{stack}.txt"),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
        results: list = []
        spec = engine.AttackSpec(targets=targets, rate=rate, duration=seconds, name=stack, timeout=10)
        engine.attack(spec, results.append)
        after = thread_cpu(pgids)
        after_m = triton_metrics(metrics_port) if has_triton else {}
        if spy:
            spy.wait(timeout=py_spy + 30)
    summary = summarize(results)
    ok = sum(1 for r in results if 200 <= r.code < 400)
    groups: defaultdict[str, float] = defaultdict(float)
    for key, (kind, cpu) in after.items():
        groups[kind] += cpu - before.get(key, (kind, 0.0))[1]
    per_request = {kind: cpu / ok * 1e6 for kind, cpu in sorted(groups.items(), key=lambda kv: -kv[1]) if cpu > 0}
    models = {}
    for model, values in after_m.items():
        delta = {k: v - before_m.get(model, {}).get(k, 0.0) for k, v in values.items()}
        requests = delta.get("nv_inference_request_success") or 0
        if requests:
            models[model] = {
                "batch": delta["nv_inference_count"] / max(1.0, delta["nv_inference_exec_count"]),
                **{
                    k.removeprefix("nv_inference_").removesuffix("_duration_us") + "_us_per_request": delta[k]
                    / requests
                    for k in METRICS[3:]
                },
            }
    return {
        "stack": stack,
        "rate": rate,
        "seconds": seconds,
        "answered_per_second": ok / seconds,
        "p50_ms": summary["latencies"]["50th"] / 1e6,
        "p99_ms": summary["latencies"]["99th"] / 1e6,
        "cpu_us_per_request": per_request,
        "total_cpu_us_per_request": sum(per_request.values()),
        "triton_models": models,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, choices=("fastapi", "triton", "clearml", "minimal"))
    parser.add_argument("--model-dir", type=Path, default=Path("build/model"))
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--py-spy", type=float, default=0.0, help="Seconds of py-spy on one worker (0: none).")
    parser.add_argument("--out", type=Path, default=Path("results/cpu"))
    args = parser.parse_args()
    found = breakdown(args.stack, args.model_dir, args.rate, args.seconds, args.py_spy, args.out)
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
