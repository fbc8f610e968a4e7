"""Process groups: whether one is alive, and stopping one gracefully, then by force."""

from __future__ import annotations

import os
import signal
import time


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


def group_alive(pgid: int) -> bool:
    """Whether any process of the group `pgid` is left."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


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
