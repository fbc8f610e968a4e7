"""Process groups: whether one is alive, and stopping one gracefully, then by force; the same for one process (the
supervisor, which may share its group with the shell that started it)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (`_running`; a zombie, dead but not yet reaped by a parent that is not us, does
    not)."""
    if not _alive(pid):
        return False
    fields = _stat(pid)
    return fields is None or _running(pid, fields[0])  # no /proc: trust the signal


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after its command's name (its state first, then its parent, then its group);
    None where it cannot be read (no /proc, or the process gone meanwhile)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _running(pid: int | str, state: str) -> bool:
    """Whether a process in `state` runs: it is no zombie, or it is one whose main thread ended while another thread
    of it still runs (during its exit, or after `pthread_exit`), holding its memory, files and ports."""
    if state != "Z":
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False  # reaped meanwhile


def stop_process(pid: int, timeout: float) -> bool:
    """SIGTERM one process, SIGKILL it after `timeout`; whether it was running."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        while pid_alive(pid):
            time.sleep(0.05)
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of the group `pgid` runs. Zombies whose threads have all ended do not count: they hold no
    port, file or memory, and those whose parent exited first wait for PID 1 to reap them, which some container
    inits do only every few seconds."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    if not Path("/proc").is_dir():
        return True  # no /proc: trust the signal
    if _runs_in(str(pgid), pgid):  # the leader, most often the one still running
        return True
    try:
        pids = [entry for entry in os.listdir("/proc") if entry.isdigit() and entry != str(pgid)]
    except OSError:
        return True
    return any(_runs_in(pid, pgid) for pid in pids)


def _runs_in(pid: str, pgid: int) -> bool:
    """Whether process `pid` is in group `pgid` and runs (`_running`)."""
    fields = _stat(pid)
    return fields is not None and int(fields[2]) == pgid and _running(pid, fields[0])


def stop_group(pgid: int, timeout: float) -> None:
    """SIGTERM the process group (graceful drain), then SIGKILL whatever is left after `timeout`."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _alive(pgid)  # reap the leader if it is our child
        if not group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while group_alive(pgid) and _alive(pgid):
        time.sleep(0.05)
