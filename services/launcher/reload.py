"""A rolling restart of a gunicorn server's workers (`serving reload`), one worker at a time, with the server's capacity
never below its worker count: gunicorn starts one worker more (SIGTTIN to its master); once that worker is in the
accept loop, gunicorn stops its oldest one (SIGTTOU: SIGTERM, in-flight requests finish within its graceful timeout);
the next old worker only once that one is gone. Each new worker imports the app afresh (no `preload_app`): new code
and configuration, the same sockets.

gunicorn's own reload (SIGHUP to the master) starts every new worker and stops every old one at once, before any new
one has loaded its app: requests wait in the listening socket's backlog for seconds, and each worker's own gRPC port
(`GATEWAY_GRPC_PORT`, one socket per worker) refuses connections meanwhile.

When a worker is in the accept loop, read from the kernel (Linux's /proc), not from a log line: its event loop has
the server's shared listening socket registered (the `tfd` entries of its epoll descriptor name the socket's inode),
which uvicorn does only after the app's lifespan startup (endpoints loaded, warmed up) completed; each further
listening port of the server (the gateway's gRPC port) is a socket of its own in the worker, opened at the end of
that same startup."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from services.launcher.ports import listening_inodes

T = TypeVar("T")

PROC = Path("/proc")


class ReloadFailed(Exception):
    """The rolling restart stopped: the message says where and what the server runs now."""


def workers(master: int, proc: Path = PROC) -> list[int]:
    """The master's child processes (its workers), as the kernel lists them."""
    found: list[int] = []
    for children in (proc / str(master) / "task").glob("*/children"):
        try:
            found += [int(pid) for pid in children.read_text().split()]
        except OSError:
            continue
    return sorted(found)


def listening(port: int, proc: Path = PROC) -> set[int]:
    """The inodes of the TCP sockets (IPv4 and IPv6) listening on `port`, any address."""
    return {int(inode) for inode in listening_inodes(port, proc)}


def sockets(pid: int, proc: Path = PROC) -> set[int]:
    """The inodes of the sockets process `pid` holds open."""
    held = set()
    for fd in (proc / str(pid) / "fd").glob("*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(int(target[8:-1]))
    return held


def polled(pid: int, proc: Path = PROC) -> set[int]:
    """The inodes of the files process `pid`'s epoll descriptors watch."""
    watched = set()
    for info in (proc / str(pid) / "fdinfo").glob("*"):
        try:
            text = info.read_text()
        except OSError:
            continue
        watched |= {int(inode, 16) for inode in re.findall(r"^tfd:.*\bino:([0-9a-f]+)", text, re.M)}
    return watched


def accepting(pid: int, ports: list[int], master: int, proc: Path = PROC) -> bool:
    """Whether worker `pid` serves every port: it polls the master's listening socket of `ports[0]` and holds a
    listening socket of its own on each other port."""
    shared = listening(ports[0], proc) & sockets(master, proc)
    if not shared or not shared & polled(pid, proc):
        return False
    held = sockets(pid, proc)
    return all(listening(port, proc) & held for port in ports[1:])


def alive(pid: int, proc: Path = PROC) -> bool:
    """Whether process `pid` runs: it exists and has not exited (a zombie its parent has not reaped has)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] not in (["Z"], ["X"])


@contextmanager
def exclusive(master: int, folder: Path | None = None) -> Iterator[None]:
    """Held while one reload of `master` runs: a second one at the same time would take the first one's new worker
    for its own and stop workers the first one counts on. A lock file per user and pid in `folder` (default: the
    temporary directory, writable in a read-only container too), released when the process ends, however it ends."""
    path = (folder or Path(tempfile.gettempdir())) / f"serving-reload-{os.getuid()}-{master}.lock"
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ReloadFailed(f"cannot open the reload lock {path}: {exc.strerror}") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise ReloadFailed(f"another reload of process {master} runs; wait for it to finish") from None
    try:
        yield
    finally:
        os.close(descriptor)


def roll(
    master: int,
    ports: list[int],
    *,
    timeout: float,
    say: Callable[[str], None],
    proc: Path = PROC,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
    signal_master: Callable[[int, int], None] = os.kill,
) -> list[int]:
    """Replace every worker of gunicorn master `master`, serving `ports` (its bound port first), one at a time;
    `timeout`: seconds each new worker gets to be accepting and each old one to finish. Returns the new workers."""
    try:
        command = (proc / str(master) / "cmdline").read_bytes()
    except OSError:
        raise ReloadFailed(f"no process {master}") from None
    if not alive(master, proc):
        raise ReloadFailed(f"process {master} has exited (its parent has not reaped it yet)")
    if b"gunicorn" not in command:
        shown = command.replace(b"\0", b" ").decode(errors="replace")[:100]
        raise ReloadFailed(f"process {master} is not a gunicorn master: {shown}")
    old = workers(master, proc)
    if not old:
        raise ReloadFailed(f"process {master} has no workers: is it a gunicorn master?")
    if not listening(ports[0], proc) & sockets(master, proc):
        raise ReloadFailed(f"process {master} does not listen on port {ports[0]}: give the port it binds first")
    for port in ports[1:]:
        if missing := [pid for pid in old if not listening(port, proc) & sockets(pid, proc)]:
            raise ReloadFailed(f"worker {missing[0]} does not listen on port {port}: give only its workers' own ports")
    new: list[int] = []

    def wait(what: str, done: Callable[[], T]) -> T:
        deadline = clock() + timeout
        while True:
            if not alive(master, proc):  # its workers gone with it: no answer to wait for
                raise ReloadFailed(f"process {master} has exited; {len(new)} of {len(old)} workers were replaced")
            if result := done():
                return result
            if clock() > deadline:
                raise ReloadFailed(what)
            pause(0.1)

    def send(sig: int) -> None:
        try:
            signal_master(master, sig)
        except ProcessLookupError:
            raise ReloadFailed(f"process {master} has exited; {len(new)} of {len(old)} workers were replaced") from None
        except PermissionError:
            raise ReloadFailed(f"not allowed to signal process {master}: it runs as another user") from None

    for number in range(1, len(old) + 1):
        send(signal.SIGTTIN)
        started = wait(
            f"worker {number} of {len(old)}: no new worker was accepting within {timeout:.0f}s; the old workers keep "
            "serving beside it (the server runs one worker more until it restarts); its log says why",
            lambda: [p for p in workers(master, proc) if p not in old + new and accepting(p, ports, master, proc)],
        )
        new.append(started[0])
        remaining = len(set(workers(master, proc)) & set(old))

        def one_old_fewer(remaining: int = remaining) -> bool:
            return len(set(workers(master, proc)) & set(old)) < remaining

        send(signal.SIGTTOU)  # gunicorn stops its oldest worker: one of the old ones
        wait(f"worker {number} of {len(old)}: an old worker did not stop within {timeout:.0f}s", one_old_fewer)
        say(f"worker {number} of {len(old)} replaced: pid {started[0]} accepting")
    return new
