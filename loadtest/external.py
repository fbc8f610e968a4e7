"""Other engines: Apache Bench (Debian's apache2-utils), to reproduce the original study's methodology exactly,
and Vegeta when its binary is on PATH (it is not installable here; this path stays small)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loadtest.results import Result
from loadtest.spec import AttackSpec, AttackStats
from loadtest.targets import write_vegeta_targets
from services.common.errors import ConfigurationError


def require(binary: str, hint: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise ConfigurationError(f"`{binary}` is not on PATH: {hint}")
    return path


def check(engine: str, spec: AttackSpec) -> str | None:
    """Refuse an attack the engine cannot run, before anything starts; returns the engine's binary (None for the
    built-in engine)."""
    if engine == "ab":
        return ab_binary(spec)
    if engine == "vegeta":
        return vegeta_binary(spec)
    return None


def _http_only(engine: str, spec: AttackSpec) -> None:
    if any(t.url.startswith("grpc://") for t in spec.targets):
        raise ConfigurationError(f"--engine {engine} speaks HTTP only: attack gRPC targets with --engine builtin")


def ab_binary(spec: AttackSpec) -> str:
    """Apache Bench's binary, once the attack is one it can run."""
    _http_only("ab", spec)
    if spec.rate is not None:
        raise ConfigurationError("--engine ab runs a closed loop: drop --rate and give --concurrency and --requests")
    if spec.requests is None:
        raise ConfigurationError("--engine ab needs --requests N (ab -n): how many requests to send")
    return require("ab", "install Apache Bench (Debian: apt-get install apache2-utils)")


def vegeta_binary(spec: AttackSpec) -> str:
    """Vegeta's binary, once the attack is one it can run."""
    _http_only("vegeta", spec)
    if spec.rate is None:
        raise ConfigurationError("--engine vegeta runs an open loop: give --rate")
    return require("vegeta", "install it from its releases page, or use the built-in engine (--engine builtin)")


def ab_attack(spec: AttackSpec, on_result: Callable[[Result], None]) -> AttackStats:
    """Closed loop with `ab -l -c concurrency -n requests` on the first target; per-request times from `ab -g`.

    `-l` accepts responses of varying length, as the original study ran it: without it ab counts every response
    whose length differs from the first one's as failed, and embeddings serialised as JSON vary in length (2.35%
    "success" on the FastAPI stack)."""
    binary = ab_binary(spec)
    target = spec.targets[0]
    with tempfile.TemporaryDirectory() as tmp:
        body, gnuplot = Path(tmp) / "body", Path(tmp) / "times.tsv"
        body.write_bytes(target.body)
        argv = [binary, "-q", "-k", "-l", "-c", str(spec.concurrency), "-n", str(spec.requests)]
        argv += ["-s", str(int(spec.timeout)), "-g", str(gnuplot)]
        if target.method == "POST":
            argv += ["-p", str(body), "-T", target.headers.get("content-type", "application/json")]
        started, start = time.time(), time.monotonic()
        out = subprocess.run(argv + [target.url], capture_output=True, text=True, check=True).stdout
        wall = time.monotonic() - start
        with open(gnuplot) as handle:
            rows = sorted(csv.DictReader(handle, delimiter="\t"), key=lambda r: int(r["seconds"]))  # as _spread
    failed = min(len(rows), _ab_field(out, "Failed requests") + _ab_field(out, "Non-2xx responses"))
    size = _ab_field(out, "HTML transferred") // max(1, len(rows))
    for seq, (stamp, row) in enumerate(zip(_spread(rows, started, started + wall), rows, strict=True)):
        code = 0 if seq < failed else 200  # ab counts failures but does not say which request failed
        on_result(
            Result(
                seq=seq,
                timestamp=stamp,
                latency=int(float(row["ttime"]) * 1e6),
                code=code,
                bytes_in=size,
                bytes_out=len(target.body),
                url=target.url,
                error="ab: failed or non-2xx" if code == 0 else "",
                attack=spec.name,
            )
        )
    return AttackStats(sent=len(rows), first_send=0.0, last_send=wall, wall_seconds=wall)


def _spread(rows: list[dict], started: float, ended: float) -> list[float]:
    """Start times for ab's rows, which it gives only to the whole second: each second's requests spread evenly over
    the part of that second in which they can have started (after the run began, and before its end less their mean
    latency), so rates computed from them agree with the built-in engine's (whole seconds alone would be up to a
    second off: a third of a 3-second run)."""
    buckets: dict[int, list[dict]] = {}
    for row in rows:
        buckets.setdefault(int(row["seconds"]), []).append(row)
    stamps = []
    for second, items in sorted(buckets.items()):
        mean_latency = sum(float(r["ttime"]) for r in items) / len(items) / 1000
        low = max(float(second), started)
        high = max(low, min(second + 1.0, ended - mean_latency))
        stamps += [low + (i + 0.5) * (high - low) / len(items) for i in range(len(items))]
    return stamps


def _ab_field(text: str, name: str) -> int:
    """An integer field of ab's report (0 when absent; "Document Length: Variable" under -l is not one)."""
    for line in text.splitlines():
        if line.startswith(name + ":"):
            value = line.split(":")[1].split()[0]
            return int(value) if value.isdigit() else 0
    return 0


def vegeta_attack(spec: AttackSpec, on_result: Callable[[Result], None]) -> AttackStats:
    """`vegeta attack -format=json -rate=R | vegeta encode --to json`, read back as results."""
    binary = vegeta_binary(spec)
    with tempfile.TemporaryDirectory() as tmp:
        targets = Path(tmp) / "targets.json"
        write_vegeta_targets(spec.targets, targets)
        argv = [
            binary,
            "attack",
            "-format=json",
            f"-targets={targets}",
            f"-rate={spec.rate:g}/1s",
            f"-duration={spec.duration or 0:g}s",
            f"-timeout={spec.timeout:g}s",
        ]
        if spec.requests:
            argv.append(f"-max-workers={spec.max_inflight}")
        attack = subprocess.Popen(argv, stdout=subprocess.PIPE)
        encoded = subprocess.run(
            [binary, "encode", "--to", "json"], stdin=attack.stdout, capture_output=True, text=True, check=True
        ).stdout
        attack.wait()
    count = 0
    for line in encoded.splitlines():
        if line.strip():
            on_result(Result.from_vegeta(json.loads(line)))
            count += 1
    return AttackStats(sent=count)
