"""Triton's log rewriter: the launched process becomes the server itself (its pid is the one recorded, the one to
signal), its output still arrives as JSON lines, and killing it leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from services.launcher import Launcher, ProcessSpec
from tests.support.servers import processes_mentioning

SERVER = (
    "import os, time; "
    "print(f'I1130 00:08:34.332 1 server.cc:42] \"pid {{os.getpid()}}\"', flush=True); "
    "time.sleep(60)  # {tag}"
)


def wait_for(condition, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_the_recorded_pid_is_the_servers_and_killing_it_orphans_nothing(tmp_path):
    tag = f"logpipe-test-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "services.triton.logpipe", "--", sys.executable, "-c", SERVER.format(tag=tag)]
    launcher = Launcher(tmp_path)
    proc = launcher.start(ProcessSpec(name="triton", argv=argv), detach=True)
    log = launcher.log_path("triton")
    wait_for(lambda: log.is_file() and log.read_text().strip())
    entry = json.loads(log.read_text().splitlines()[0])
    assert entry["msg"] == f"pid {proc.pid}" and entry["level"] == "INFO" and entry["logger"] == "server.cc:42"
    assert (tmp_path / "triton.pid").read_text() == str(proc.pid)
    assert "services.triton.logpipe" in " ".join(processes_mentioning("services.triton.logpipe")), "the rewriter runs"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(5)
    wait_for(lambda: processes_mentioning(tag) == [] and not any(tag in p for p in processes_mentioning("logpipe")))


def test_the_rewriter_outlives_sigterm_to_keep_the_servers_last_lines(tmp_path):
    server = (
        "import signal, sys, time; "
        "signal.signal(signal.SIGTERM, lambda *a: (print('draining', flush=True), sys.exit(0))); "
        "print('up', flush=True); time.sleep(60)"
    )
    argv = [sys.executable, "-m", "services.triton.logpipe", "--", sys.executable, "-c", server]
    launcher = Launcher(tmp_path)
    proc = launcher.start(ProcessSpec(name="triton", argv=argv, stop_timeout=5), detach=True)
    log = launcher.log_path("triton")
    wait_for(lambda: log.is_file() and "up" in log.read_text())
    launcher.stop_all()  # SIGTERM to the whole group, the rewriter included
    assert [json.loads(line)["msg"] for line in log.read_text().splitlines()] == ["up", "draining"]
    assert proc.poll() is not None
