"""round_robin, least_work without hedging and least_work (hedged, the default) side by side in one run (a
measurement that prints numbers, not a test): two real Tritons (the exported model in build/model, batching on) on
127.0.0.2 and 127.0.0.3, three gateways (one worker each, one per policy) over both, `hey -c 32` (Debian package
`hey`) against each in turn. Healthy: sequences
and calls per replica (Triton's own counts, and the gateway's `serving_triton_sequences_total`, which leaves out the
copies sent to a slow replica), req/s, p50, p99. Slow: replica B's process tree held to 10% of a core (cgroup v1
`cpu.cfs_quota_us`, as root), the same; then released, least_work's sequences per replica every 5 s.

    PYTHONPATH=. .venv/bin/python tests/integration/triton/measure_balance.py

HEALTHY_PAIRS, SLOW_PAIRS, SLOW_POLICIES and SECONDS_PER_RUN shorten it; `hedges` is the gateway's count of calls
copied to the other replica during a run. RATE=<req/s> attacks at that rate, open loop (`loadtest attack --rate`),
instead of hey's closed loop of 32, which turns any capacity lost into latency (at a rate one replica serves alone,
what a slow replica costs is the routing's), and ends with one continuous attack per policy through healthy, slow and
released phases (`continuous`). Figures: docs/decisions/replica-balance.md."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from loadtest.results import read_results
from services.triton.repository import RenderOptions
from tests.support.partition import tree
from tests.support.servers import start_gateway, start_triton, triton_metric

MODEL = Path("build/model").resolve()
CGROUP = Path("/sys/fs/cgroup/cpu/serving-slow-replica")
BODY = json.dumps({"text": "A short sentence about replicas and load."})
SECONDS = int(os.environ.get("SECONDS_PER_RUN", "6"))
POLICIES = {
    "round_robin": {"GATEWAY_TRITON_BALANCE": "round_robin"},
    "least_work": {"GATEWAY_TRITON_BALANCE": "least_work", "GATEWAY_TRITON_HEDGE": "false"},
    "hedged": {"GATEWAY_TRITON_BALANCE": "least_work"},
}


def counts(server) -> tuple[float, float]:
    return (
        triton_metric(server, "nv_inference_count", "encoder"),
        triton_metric(server, "nv_inference_request_success", "encoder"),
    )


def throttle(server, percent: int | None) -> None:
    if percent is None:
        for pid in tree(server.pid):
            with contextlib.suppress(OSError):  # gone meanwhile
                Path("/sys/fs/cgroup/cpu/cgroup.procs").write_text(str(pid))
        return
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "cpu.cfs_period_us").write_text("100000")
    (CGROUP / "cpu.cfs_quota_us").write_text(str(percent * 1000))
    for pid in tree(server.pid):
        with contextlib.suppress(OSError):
            (CGROUP / "cgroup.procs").write_text(str(pid))


RATE = float(os.environ["RATE"]) if os.environ.get("RATE") else None


def attack(url: str, seconds: int) -> dict:
    """`hey`'s closed loop of 32, or with RATE the project's open-loop attacker at that rate."""
    if RATE is None:
        return hey(url, seconds)
    command = [
        str(Path(sys.executable).with_name("loadtest")),
        "attack",
        "--url",
        url,
        "--rate",
        str(RATE),
        "--duration",
        str(seconds),
        "--report",
        "json",
    ]
    with tempfile.TemporaryDirectory() as scratch:
        command += ["--output", f"{scratch}/results.jsonl", "--timeout", "20"]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    report = json.loads(out[out.index("{") :])
    latencies = report["latencies"]
    return {
        "rps": report["throughput"],
        "p50_ms": latencies["50th"] / 1e6,
        "p99_ms": latencies["99th"] / 1e6,
        "codes": report["status_codes"],
    }


def hey(url: str, seconds: int) -> dict:
    out = subprocess.run(
        [
            "hey",
            "-z",
            f"{seconds}s",
            "-c",
            "32",
            "-t",
            "20",
            "-m",
            "POST",
            "-T",
            "application/json",
            "-d",
            BODY,
            f"{url}/serve/minilm",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])
    p50 = float(re.search(r"50% in ([\d.]+) secs", out)[1])
    p99 = float(re.search(r"99% in ([\d.]+) secs", out)[1])
    codes = dict(re.findall(r"\[(\d+)\]\s+(\d+) responses", out))
    return {"rps": rps, "p50_ms": p50 * 1000, "p99_ms": p99 * 1000, "codes": codes}


def gateway_seqs(url: str, tritons, metric: str = "serving_triton_sequences_total") -> list[float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return [
        sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith(f"{metric}{{") and f'"{t.grpc_url}"' in line
        )
        for t in tritons
    ]


def run(name: str, url: str, tritons, seconds: int, sample_every: float | None = None) -> dict:
    before = [counts(t) for t in tritons]
    gw_before = gateway_seqs(url, tritons)
    hedges_before = sum(gateway_seqs(url, tritons, "serving_triton_hedges_total"))
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sampler():
        last = [counts(t)[0] for t in tritons]
        while not stop.wait(sample_every):
            now = [counts(t)[0] for t in tritons]
            got = [n - b if n >= b else n for n, b in zip(now, last, strict=True)]
            samples.append(tuple(got))
            last = now

    thread = threading.Thread(target=sampler, daemon=True) if sample_every else None
    if thread:
        thread.start()
    result = attack(url, seconds)
    stop.set()
    if thread:
        thread.join()
    after = [counts(t) for t in tritons]
    gw = [a - b for a, b in zip(gateway_seqs(url, tritons), gw_before, strict=True)]
    seqs = [a[0] - b[0] for a, b in zip(after, before, strict=True)]
    calls = [a[1] - b[1] for a, b in zip(after, before, strict=True)]
    result.update(
        policy=name,
        seqs=seqs,
        calls=calls,
        b_seq_share=round(seqs[1] / max(1, sum(seqs)), 3),
        b_call_share=round(calls[1] / max(1, sum(calls)), 3),
        gateway_seqs=gw,
        b_gateway_share=round(gw[1] / max(1, sum(gw)), 3) if sum(gw) else None,
        hedges=sum(gateway_seqs(url, tritons, "serving_triton_hedges_total")) - hedges_before,
        samples=samples,
    )
    print(json.dumps(result), flush=True)
    return result


def continuous(url: str, b, rate: float, phases: tuple[float, float, float] = (10, 20, 20)) -> dict:
    """One open-loop attack on `url` through three phases, healthy / B held to 10% of a core / B released, so the
    event's p99 counts its onset once, as under steady traffic (runs apart let B's slowness fade while the gateway
    idles, and each run pays the onset again). p50/p99 of the requests sent in each phase."""
    healthy, slow, _ = phases
    output = Path(tempfile.mkdtemp(prefix="continuous-")) / "results.jsonl"  # kept: `loadtest report` reads it
    command = [str(Path(sys.executable).with_name("loadtest")), "attack", "--url", url, "--rate", str(rate)]
    command += ["--duration", str(sum(phases)), "--report", "none", "--output", str(output), "--timeout", "20"]
    attacker = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    started = time.time()
    time.sleep(healthy)
    throttle(b, 10)
    time.sleep(slow)
    throttle(b, None)
    attacker.wait(timeout=sum(phases) + 60)
    results = read_results(output)
    edges = [started, started + healthy, started + healthy + slow, float("inf")]
    summary = {}
    for name, low, high in zip(("healthy", "slow", "released"), edges, edges[1:], strict=False):
        latencies = np.array([r.latency for r in results if low <= r.timestamp < high]) / 1e6
        failed = sum(1 for r in results if low <= r.timestamp < high and not 200 <= r.code < 300)
        summary[name] = {
            "requests": len(latencies),
            "failed": failed,
            "p50_ms": round(float(np.percentile(latencies, 50)), 1),
            "p99_ms": round(float(np.percentile(latencies, 99)), 1),
        }
    summary["p99_ratio"] = round(summary["slow"]["p99_ms"] / summary["healthy"]["p99_ms"], 2)
    print(json.dumps({"continuous": summary}), flush=True)
    return summary


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="balance-"))
    a = start_triton(base / "a", MODEL, RenderOptions(batching=True), ("encoder",), address="127.0.0.2")
    b = start_triton(base / "b", MODEL, RenderOptions(batching=True), ("encoder",), address="127.0.0.3", ports=a.ports)
    tritons = [a, b]
    target = f"{a.grpc_url},{b.grpc_url}"
    gateways = {}
    try:
        for policy, env in POLICIES.items():
            gateways[policy] = start_gateway(
                base / policy, MODEL, a, workers=1, env={"GATEWAY_TRITON_GRPC_URL": target, **env}
            )
        for gw in gateways.values():
            attack(gw.url, 2)  # warm up
        print("# healthy", flush=True)
        for _ in range(int(os.environ.get("HEALTHY_PAIRS", "3"))):
            for policy, gw in gateways.items():
                run(policy, gw.url, tritons, SECONDS)
        print("# B held to 10% of a core", flush=True)
        throttle(b, 10)
        time.sleep(0.5)
        for _ in range(int(os.environ.get("SLOW_PAIRS", "2"))):
            for policy, gw in gateways.items():
                if policy not in os.environ.get("SLOW_POLICIES", ",".join(POLICIES)):
                    continue
                run(policy, gw.url, tritons, 10, sample_every=2.0)
                time.sleep(3)  # let B drain what it held
        print("# B released: hedged least_work, share of B per 5 s", flush=True)
        throttle(b, None)
        run("hedged", gateways["hedged"].url, tritons, 30, sample_every=5.0)
        if RATE is not None:
            print("# continuous, each policy: 10 s healthy, 20 s B held to 10% of a core, 20 s released", flush=True)
            for policy, gw in gateways.items():
                print(f"# {policy}", flush=True)
                continuous(gw.url, b, RATE)
    finally:
        with contextlib.suppress(OSError):
            throttle(b, None)
        for gw in gateways.values():
            gw.launcher.stop_all()
        for t in tritons:
            t.stop()
        if CGROUP.exists():
            CGROUP.rmdir()


if __name__ == "__main__":
    main()
