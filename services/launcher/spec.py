"""What the launcher starts (`ProcessSpec`), and the port checks around it."""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class ProcessSpec:
    """One process of a stack, as the launcher starts it."""

    name: str
    """Names its pid file, its log file and its `LOG_SERVICE`."""
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """Added to the launcher's own environment."""
    ready_url: str | None = None
    """Answers 200 once the process serves; None: ready as soon as it runs."""
    ports: list[int] = field(default_factory=list)
    """Checked free before the start (a clear error instead of a bind failure in the log)."""
    stop_timeout: float = 30.0
    """Seconds from SIGTERM to SIGKILL."""
    explain: Callable[[str], str | None] | None = None
    """Turns the process's log into a readable reason when it fails to start."""
    liveness: Callable[[float], None] | None = None
    """One liveness check with a deadline in seconds, raising with the reason when the process is wedged (it runs but
    does not do its work); the supervisor runs it every few seconds and restarts the process after several
    failures in a row. None: the process is watched for its exit only."""
    prepare: Callable[[], object] | None = None
    """Runs before each start, the first and every restart (e.g. a fresh directory for prometheus_client's files:
    a dead process's files would add up with the new one's)."""
    cleanup: Callable[[], None] | None = None
    """Runs once the launcher has stopped the process (e.g. removing the directory `prepare` filled)."""


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a listener could bind `port` on `host` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def local_address(bind: str) -> str:
    """Where this machine reaches a server bound to `bind` (any address: loopback; another loopback address, such as a
    test's host at 127.0.0.7: that address)."""
    return "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind


_HANDED_OUT: deque[int] = deque(maxlen=1024)
"""The ports `free_port` gave lately: the kernel may hand out a port again as soon as its socket closes, and a caller
asking for three ports in a row got the same one twice."""


def free_port() -> int:
    """A port the kernel has just handed out as free on loopback, none of the last 1,024 this process was given (for
    tests and throwaway processes)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.append(port)
            return port
