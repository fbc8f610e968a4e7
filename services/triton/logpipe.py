"""Triton's log as JSON lines: runs tritonserver and rewrites each line it prints (and its Python-backend stubs
print) as one JSON object with time, service, level, logger and message, so `serving logs` merges it with the others.

    python -m services.triton.logpipe -- tritonserver --model-repository=...

The process the launcher started becomes tritonserver itself (exec), its output piped into a rewriter it forked
first: the recorded pid is the server's (the one to signal, whose exit the supervisor sees), and killing it never
orphans a server that would then lose its log. The rewriter ignores SIGTERM (it reaches the whole process group)
and ends when the last writer (Triton, its stubs) has closed the pipe, so Triton's last lines are kept.

Triton's own format is `I1130 00:08:34.332 123 file.cc:42] "message"` (I/W/E/F for the level); other lines keep
level INFO. The errors and warnings Triton prints when it finds no GPU (CUDA, NVML, DCGM) are marked
`"no_gpu": true`: expected on a CPU machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time

LINE = re.compile(r"^([IWEF])\d{4} (\d\d:\d\d:\d\d\.\d+) +\d+ ([^\]]+)\] ?(.*)$")
LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}
NO_GPU = re.compile(r"CUDA|NVML|DCGM|cuda|GPU|unable to create stream", re.IGNORECASE)


def to_json(line: str) -> str:
    """One line of Triton's output as a JSON log line, stamped now (Triton's own stamp has no date)."""
    now = time.time()
    entry: dict[str, str | bool] = {
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
    if entry["level"] in ("ERROR", "WARNING") and NO_GPU.search(str(entry["msg"])):
        entry["no_gpu"] = True  # Triton looking for a GPU on a machine without one: harmless
    return json.dumps(entry)


def rewrite(source: int) -> None:
    """Rewrite the lines read from descriptor `source` onto stdout until every writer has closed it."""
    with os.fdopen(source, errors="replace") as lines:
        for line in lines:
            if line.strip():
                print(to_json(line.rstrip("\n")), flush=True)


def main() -> int:
    """Fork the rewriter, then become the command after `--` with its stdout and stderr piped into it."""
    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m services.triton.logpipe -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    source, sink = os.pipe()
    if os.fork() == 0:  # the rewriter
        os.close(sink)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            rewrite(source)
        finally:
            os._exit(0)
    os.close(source)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)
    os.execvp(argv[0], argv)
    return 127  # not reached: exec replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
