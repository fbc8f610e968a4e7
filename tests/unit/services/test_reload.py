"""`services.launcher.reload` over a /proc written by the test: which worker is accepting, and the rolling order
(one worker more, then the oldest stopped, one at a time), with a gunicorn master simulated by its signals. The real
master under load: tests/integration/scaleout/test_fleet_upgrades.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from services.launcher.reload import ReloadFailed, accepting, exclusive, listening, roll, workers

MASTER, PORT, GRPC = 100, 8080, 8081
SHARED, OTHER_HOST = 5001, 5002  # inodes: the master's listener, another server's on the same port


class FakeProc:
    """/proc as the reload reads it: the master's children, the listening sockets, each process's sockets and what
    its epoll descriptor watches."""

    def __init__(self, root: Path):
        self.root = root
        self.tcp: list[tuple[int, int]] = [(PORT, SHARED), (PORT, OTHER_HOST)]
        self.next_inode = 6000
        self.process(MASTER, sockets=[SHARED])
        self.state(MASTER, "S")
        (root / str(MASTER) / "cmdline").write_bytes(b"python\0-m\0gunicorn\0--bind\x000.0.0.0:8080\0")
        self.children: list[int] = []

    def process(self, pid: int, sockets=(), polled=()) -> None:
        fd, info = self.root / str(pid) / "fd", self.root / str(pid) / "fdinfo"
        fd.mkdir(parents=True, exist_ok=True)
        info.mkdir(parents=True, exist_ok=True)
        for number, inode in enumerate(sockets, 3):
            (fd / str(number)).unlink(missing_ok=True)
            (fd / str(number)).symlink_to(f"socket:[{inode}]")
        lines = [f"tfd: {9 + i:8d} events: 19 data: 9 pos:0 ino:{inode:x} sdev:9" for i, inode in enumerate(polled)]
        (info / "20").write_text("pos:\t0\nflags:\t02\n" + "".join(line + "\n" for line in lines))

    def state(self, pid: int, state: str) -> None:
        """/proc/PID/stat with the process's state: S sleeping, Z exited and not reaped."""
        (self.root / str(pid) / "stat").write_text(f"{pid} (gunicorn: mas) ter) {state} 1 {pid} {pid} 0 -1\n")

    def write(self) -> None:
        task = self.root / str(MASTER) / "task" / str(MASTER)
        task.mkdir(parents=True, exist_ok=True)
        (task / "children").write_text(" ".join(map(str, self.children)))
        rows = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"]
        for i, (port, inode) in enumerate(self.tcp):
            timers = "00000000:00000000 00:00000000 00000000 0 0"
            rows.append(f"   {i}: 0600007F:{port:04X} 00000000:0000 0A {timers} {inode}")
        (self.root / "net").mkdir(exist_ok=True)
        (self.root / "net" / "tcp").write_text("\n".join(rows) + "\n")

    def start_worker(self, pid: int, ready: bool = True) -> None:
        """A forked worker: the shared listener inherited; polled (and its gRPC socket open) once ready."""
        grpc = self.next_inode
        self.next_inode += 1
        if ready:
            self.tcp.append((GRPC, grpc))
        self.process(pid, sockets=[SHARED, grpc] if ready else [SHARED], polled=[SHARED] if ready else [])
        self.children.append(pid)
        self.write()


@pytest.fixture
def proc(tmp_path) -> FakeProc:
    fake = FakeProc(tmp_path)
    for pid in (201, 202):
        fake.start_worker(pid)
    return fake


def test_a_worker_accepts_once_it_polls_the_masters_listener_and_holds_every_other_port(proc):
    assert workers(MASTER, proc.root) == [201, 202]
    assert listening(PORT, proc.root) == {SHARED, OTHER_HOST}
    proc.start_worker(203, ready=False)  # forked, its app still loading: the listener inherited, not polled
    assert accepting(201, [PORT, GRPC], MASTER, proc.root)
    assert not accepting(203, [PORT, GRPC], MASTER, proc.root)
    proc.process(203, sockets=[SHARED], polled=[OTHER_HOST])  # another server's socket on the same port
    assert not accepting(203, [PORT], MASTER, proc.root)
    proc.process(203, sockets=[SHARED], polled=[SHARED])
    assert accepting(203, [PORT], MASTER, proc.root), "HTTP only"
    assert not accepting(203, [PORT, GRPC], MASTER, proc.root), "its gRPC port not open yet"


class Master:
    """gunicorn's answer to TTIN (one worker more, accepting at once unless `starts` is false) and TTOU (its oldest
    worker stopped)."""

    def __init__(self, proc: FakeProc, starts: bool = True):
        self.proc, self.starts, self.signals, self.next_pid = proc, starts, [], 300

    def __call__(self, pid: int, sig: int) -> None:
        assert pid == MASTER
        self.signals.append(sig)
        if sig == signal.SIGTTIN:
            self.next_pid += 1
            self.proc.start_worker(self.next_pid, ready=self.starts)
        else:
            self.proc.children.pop(0)
            self.proc.write()


def test_the_workers_are_replaced_one_at_a_time_each_new_one_accepting_before_an_old_one_stops(proc):
    master, said = Master(proc), []
    new = roll(
        MASTER, [PORT, GRPC], timeout=5, say=said.append, proc=proc.root, pause=lambda s: None, signal_master=master
    )
    assert master.signals == [signal.SIGTTIN, signal.SIGTTOU] * 2
    assert new == [301, 302] and workers(MASTER, proc.root) == [301, 302]
    assert said == ["worker 1 of 2 replaced: pid 301 accepting", "worker 2 of 2 replaced: pid 302 accepting"]


def test_a_new_worker_that_never_accepts_stops_the_reload_with_the_old_ones_serving(proc):
    ticks = iter(range(1000))
    with pytest.raises(ReloadFailed, match="no new worker was accepting within 3s; the old workers keep serving"):
        roll(
            MASTER,
            [PORT, GRPC],
            timeout=3,
            say=lambda line: None,
            proc=proc.root,
            clock=lambda: next(ticks),
            pause=lambda s: None,
            signal_master=Master(proc, starts=False),
        )
    assert workers(MASTER, proc.root)[:2] == [201, 202], "no old worker stopped"


def test_a_process_that_is_not_a_gunicorn_master_gets_no_signal(proc):
    (proc.root / str(MASTER) / "cmdline").write_bytes(b"/sbin/init\0")
    master = Master(proc)
    with pytest.raises(ReloadFailed, match="is not a gunicorn master"):
        roll(MASTER, [PORT], timeout=1, say=print, proc=proc.root, signal_master=master)
    assert master.signals == []


def quick_roll(proc: FakeProc, ports: list[int], master, timeout: float = 3) -> list[int]:
    ticks = iter(range(1000))
    return roll(
        MASTER,
        ports,
        timeout=timeout,
        say=lambda line: None,
        proc=proc.root,
        clock=lambda: next(ticks),
        pause=lambda s: None,
        signal_master=master,
    )


@pytest.mark.parametrize(
    ("ports", "why"),
    [([9999], "process 100 does not listen on port 9999"), ([PORT, 7777], "worker 201 does not listen on port 7777")],
)
def test_a_port_the_server_does_not_serve_stops_the_reload_before_any_signal(proc, ports, why):
    master = Master(proc)
    with pytest.raises(ReloadFailed, match=why):
        quick_roll(proc, ports, master)
    assert master.signals == [] and workers(MASTER, proc.root) == [201, 202], "no worker more left behind"


def test_an_exited_master_not_yet_reaped_gets_no_signal(proc):
    proc.state(MASTER, "Z")
    (proc.root / str(MASTER) / "cmdline").write_bytes(b"")
    master = Master(proc)
    with pytest.raises(ReloadFailed, match="process 100 has exited"):
        quick_roll(proc, [PORT], master)
    assert master.signals == []


def test_a_master_that_exits_mid_reload_stops_it_at_once_saying_how_far_it_got(proc):
    master = Master(proc)

    def dies_after_the_first_worker(pid: int, sig: int) -> None:
        if len(master.signals) == 2:  # worker 1 replaced: the master dies, its workers with it
            proc.state(MASTER, "Z")
            proc.children.clear()
            proc.write()
        master(pid, sig)

    with pytest.raises(ReloadFailed, match="process 100 has exited; 1 of 2 workers were replaced"):
        quick_roll(proc, [PORT, GRPC], dies_after_the_first_worker, timeout=500)


@pytest.mark.parametrize(("error", "why"), [(ProcessLookupError, "has exited"), (PermissionError, "another user")])
def test_a_master_that_cannot_be_signalled_is_a_reload_failure_not_a_crash(proc, error, why):
    def refuses(pid: int, sig: int) -> None:
        raise error(sig)

    with pytest.raises(ReloadFailed, match=why):
        quick_roll(proc, [PORT], refuses)


def test_a_second_reload_of_the_same_master_is_refused_while_one_runs(tmp_path):
    with exclusive(MASTER, tmp_path):
        with pytest.raises(ReloadFailed, match="another reload of process 100 runs"), exclusive(MASTER, tmp_path):
            pass
        with exclusive(MASTER + 1, tmp_path):  # another server: its own lock
            pass
    with exclusive(MASTER, tmp_path):  # released when the first ended
        pass
