"""Triton's log as JSON lines: runs tritonserver and rewrites each line it prints (and its Python-backend stubs
print) as one JSON object with time, service, level, logger and message, so `serving logs` merges it with the others.

    python -m services.triton.logpipe -- tritonserver --model-repository=...

Triton's own format is `I1130 00:08:34.332 123 file.cc:42] "message"` (I/W/E/F for the level); other lines keep
level INFO. The errors and warnings Triton prints when it finds no GPU (CUDA, NVML, DCGM) are marked
`"no_gpu": true`: expected on a CPU machine.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

LINE = re.compile(r"^([IWEF])\d{4} (\d\d:\d\d:\d\d\.\d+) +\d+ ([^\]]+)\] ?(.*)$")
LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}
NO_GPU = re.compile(r"CUDA|NVML|DCGM|cuda|GPU|unable to create stream", re.IGNORECASE)


def to_json(line: str) -> str:
    """One line of Triton's output as a JSON log line, stamped now (Triton's own stamp has no date)."""
    now = time.time()
    entry = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
        "service": "triton",
        "level": "INFO",
        "logger": "triton",
        "msg": line,
    }
    match = LINE.match(line)
    if match:
        level, _, where, message = match.groups()
        message = message.strip()
        if len(message) >= 2 and message[0] == message[-1] == '"':
            message = message[1:-1]
        entry |= {"level": LEVELS[level], "logger": where.strip(), "msg": message}
    if entry["level"] in ("ERROR", "WARNING") and NO_GPU.search(entry["msg"]):
        entry["no_gpu"] = True  # Triton looking for a GPU on a machine without one: harmless
    return json.dumps(entry)


def main() -> int:
    """Run the command after `--`, rewrite its output line by line, exit with its exit code."""
    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    # SIGTERM reaches the whole process group (Triton included); keep rewriting until Triton has drained and exited.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, errors="replace"
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip():
            print(to_json(line.rstrip("\n")), flush=True)
    return process.wait()


if __name__ == "__main__":
    sys.exit(main())
