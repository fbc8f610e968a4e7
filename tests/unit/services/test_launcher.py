"""The launcher: process groups, pid files, readiness and stopping, with plain Python processes."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from services.common.errors import ConfigurationError
from services.launcher import Launcher, ProcessSpec, free_port, port_free, recorded, stop_recorded
from services.launcher.groups import group_alive, pid_alive
from services.launcher.records import write_meta
from tests.support.servers import processes_mentioning

SLEEPER = (
    "import time, subprocess, sys; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # {tag}-child']); "
    "time.sleep(60)  # {tag}"
)


def sleeper(tag: str) -> ProcessSpec:
    return ProcessSpec(name=tag, argv=[sys.executable, "-c", SLEEPER.format(tag=tag)], stop_timeout=5)


def test_stop_recorded_stops_the_whole_group_from_its_pid_file(tmp_path):
    tag = f"launcher-test-{time.monotonic_ns()}"
    Launcher(tmp_path).start(sleeper(tag), detach=True)
    deadline = time.monotonic() + 10
    while len(processes_mentioning(tag)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert recorded(tmp_path) == {tag: True}
    assert stop_recorded(tmp_path, timeout=5) == [tag]
    assert processes_mentioning(tag) == [], "the child of the process went with it"
    assert recorded(tmp_path) == {}


def test_stop_recorded_gives_each_process_its_own_drain_time_and_says_so_before_waiting(tmp_path):
    """`serving down` used to give every process its own --timeout (30 s): the MLflow UI, whose parent lingers after
    SIGTERM, took 34 s, and nothing was said meanwhile (issue 42)."""
    tag = f"launcher-test-{time.monotonic_ns()}"
    deaf = f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)  # {tag}"
    proc = Launcher(tmp_path).start(ProcessSpec(tag, [sys.executable, "-c", deaf], stop_timeout=0.5), detach=True)
    told = []
    assert stop_recorded(tmp_path, timeout=30, stopping=lambda *heard: told.append(heard)) == [tag]
    assert told == [(tag, proc.pid, 0.5)], "its own drain time, said before the wait"
    assert processes_mentioning(tag) == [], "killed once its drain time was over"


def test_a_process_that_exits_before_ready_is_reported_with_its_log(tmp_path):
    spec = ProcessSpec(
        name="dies",
        argv=[sys.executable, "-c", "print('no model here'); raise SystemExit(3)"],
        ready_url=f"http://127.0.0.1:{free_port()}/ready",
    )
    with pytest.raises(ConfigurationError, match=r"exited with code 3(.|\n)*no model here"):
        Launcher(tmp_path).start_ready(spec, detach=True, timeout=20)
    assert not list(tmp_path.glob("*.pid"))


def test_a_busy_port_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not port_free(port)
        spec = ProcessSpec(name="x", argv=[sys.executable, "-c", "pass"], ports=[port])
        with pytest.raises(ConfigurationError, match=f"port {port}"):
            Launcher(tmp_path).start(spec, detach=True)
    assert port_free(port)


WRITES_A_STORE = (
    "import pathlib, sqlite3, sys; run = pathlib.Path(sys.argv[1]); (run / 'lifecycle').mkdir(); "
    "sqlite3.connect(run / 'lifecycle' / 'state.db').execute('create table t (x)'); "
    "(run / 'admin-token').write_text('t')"
)


def test_the_run_directory_and_what_its_processes_write_there_are_private(tmp_path):
    """A run directory left 0755 by hand, and a process (as the gateway or the controller) creating the embedded
    state store and a secret under the command's umask 022: the directory becomes 0700, what it writes 0700/0600,
    and so do the process's record and log (before, issue 37: 0644, written by the launcher under its umask)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    run.chmod(0o755)
    spec = ProcessSpec(name="store", argv=[sys.executable, "-c", WRITES_A_STORE, str(run)])
    proc = Launcher(run).start(spec, detach=True)
    assert proc.wait(timeout=30) == 0, (run / "logs" / "store.log").read_text()
    modes = {str(p.relative_to(run)): p.stat().st_mode & 0o777 for p in [run, *run.rglob("*")]}
    assert modes["."] == modes["logs"] == modes["lifecycle"] == 0o700, modes
    assert modes["lifecycle/state.db"] == modes["admin-token"] == 0o600, modes
    assert modes["store.pid"] == modes["store.json"] == modes["logs/store.log"] == 0o600, modes


def test_one_error_names_every_taken_port_its_holder_and_a_free_one_to_give_instead():
    from services.launcher import PortClaim, check_ports

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port, twice = busy.getsockname()[1], free_port()
        claims = [
            PortClaim(port, "gateway", "--port"),
            PortClaim(twice, "triton", "--triton-http-port"),
            PortClaim(twice, "traces", "--trace-port"),
            PortClaim(twice, "controller", "CONTROLLER_METRICS_PORT"),
        ]
        with pytest.raises(ConfigurationError) as refused:
            check_ports(claims)
    message = str(refused.value)
    assert f"port {port} (gateway, --port) is in use by pid {os.getpid()} (" in message
    assert f"port {twice} (triton, --triton-http-port) is also given to traces, controller" in message
    moves = message.split("e.g.")[1]
    suggested = dict(pair.split() for pair in re.findall(r"--[a-z-]+ \d+", moves))
    suggested |= dict(pair.split("=") for pair in re.findall(r"[A-Z_]+=\d+", moves))  # a variable: NAME=port
    assert set(suggested) == {"--port", "--triton-http-port", "--trace-port", "CONTROLLER_METRICS_PORT"}
    assert len({*suggested.values()}) == 4 and str(port) not in suggested.values()
    check_ports([PortClaim(port, "gateway", "--port")])  # free again: nothing to say


def test_a_record_that_cannot_be_written_is_said_and_the_start_goes_on(tmp_path, monkeypatch, caplog):
    """Before: with the run directory's disk full, a restart's record write raised ENOSPC and the supervisor died,
    leaving the stack down. The disk full is injected here (tests/integration/hardening fills a real one)."""
    import errno

    from services.launcher import records

    def full(path, text):
        path.write_text("")  # the file was made; its content found no room
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(records, "write_private", full)
    records.write_meta(tmp_path, {"name": "api", "pid": 123})
    records.update_record(tmp_path, "api", {"phase": "running"})
    said = [r.getMessage() for r in caplog.records if "the record of api was not written" in r.getMessage()]
    assert len(said) == 2 and "No space left on device" in said[0]
    assert not list(tmp_path.glob(".*.tmp")), "no half-written record is left"


def test_free_port_never_hands_out_a_port_twice_in_a_row(monkeypatch):
    """Before: start_triton's three `free_port()` calls got the same port twice on a busy machine (the kernel reused
    it once its socket closed), and Triton refused to start. The kernel's answers are replayed here."""
    from services.launcher import spec

    given = iter([41001, 41001, 41001, 41002])

    class Socket:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, address):
            self.port = next(given)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(spec.socket, "socket", Socket)
    monkeypatch.setattr(spec, "_HANDED_OUT", spec.deque(maxlen=1024))
    assert [spec.free_port(), spec.free_port()] == [41001, 41002]


def test_the_port_suggested_instead_is_none_the_run_binds_unchecked():
    """Before: a busy 8080 got `PORT=8081` from `make up`, the gateway's own gRPC port, which the stack then binds
    (issue 42). The suggestion skips the ports the run binds without checking them first."""
    from services.launcher import PortClaim, check_ports
    from services.launcher.spec import port_free
    from services.stacks import StackOptions, unclaimed_ports

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        after = next(p for p in range(port + 1, port + 50) if port_free(p))
        with pytest.raises(ConfigurationError) as refused:
            check_ports([PortClaim(port, "gateway", "PORT")], unclaimed=frozenset({after}))
    suggested = int(re.search(r"e\.g\. PORT=(\d+)", str(refused.value)).group(1))
    assert suggested not in (port, after) and suggested > after
    assert unclaimed_ports(StackOptions()) == {8081}, "make up's gateway binds its default gRPC port"
    assert unclaimed_ports(StackOptions(grpc_port=9001)) == set(), "a given one is claimed and checked"
    assert unclaimed_ports(StackOptions(stack="fastapi")) == set()


def test_a_record_rewritten_while_it_is_read_is_never_read_half_written(tmp_path):
    """The supervisor rewrites a record at each restart while `serving status`, `serving down` and the tests read it:
    a pid file read between its truncation and its write was empty (a fleet test failed on `int('')`)."""
    write_meta(tmp_path, {"name": "triton", "pid": 1})
    seen: set[str] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add((tmp_path / "triton.pid").read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for pid in range(2, 1500):
            write_meta(tmp_path, {"name": "triton", "pid": pid})
    finally:
        done.set()
        reader.join()
    assert seen and all(text.isdigit() for text in seen), sorted(seen, key=len)[:3]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["triton.json", "triton.pid"], "no temporary file left"


ORPHAN_ZOMBIE = """
import ctypes, os, subprocess, sys, time
from services.launcher.groups import _stat, group_alive  # _stat: None for a process gone since /proc was listed
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans become our children, and we do not reap them
leader = subprocess.Popen(
    [sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'pass'])"],
    start_new_session=True,
)
leader.wait()  # the leader exits first: its child, in the same group, is ours now and a zombie once it ends
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    states = [s for s in (_stat(p) for p in os.listdir("/proc") if p.isdigit()) if s]
    members = [s[0] for s in states if int(s[2]) == leader.pid]
    if members == ["Z"]:
        break
    time.sleep(0.05)
print(members, group_alive(leader.pid))
"""


def test_a_group_left_with_only_a_zombie_nobody_has_reaped_yet_is_not_alive():
    # a zombie whose parent exited waits for PID 1 to reap it (some container inits take seconds): it holds no port
    # or file, and stopping a stack waited for each group's zombies until then
    done = subprocess.run([sys.executable, "-c", ORPHAN_ZOMBIE], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["['Z']", "False"], done.stderr


MAIN_THREAD_EXITS = """
import ctypes, sys, threading, time
threading.Thread(target=time.sleep, args=(60,)).start()  # runs on, holding the process's memory and files
print("ready", flush=True)
ctypes.CDLL(None).pthread_exit(None)  # the main thread ends: /proc/<pid>/stat says Z while the other thread runs
"""


def test_a_process_whose_main_thread_ended_while_another_runs_is_alive():
    proc = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_EXITS], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline() == b"ready\n"
        deadline = time.monotonic() + 30
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the main thread did not end"
            time.sleep(0.01)
        assert group_alive(proc.pid) and pid_alive(proc.pid), "its other thread still runs"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not group_alive(proc.pid)
