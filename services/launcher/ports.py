"""The ports a run will bind, checked all at once before its first process starts: one error names every port in
use (or claimed twice), the process of the run that would bind it, the option that moves it, a free port to give
instead, and, on Linux, the process that holds it now."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from services.common.errors import ConfigurationError
from services.launcher.spec import port_free

LISTEN = "0A"
"""The state of a listening socket in /proc/net/tcp."""


@dataclass(frozen=True)
class PortClaim:
    """A port one process of the run binds, and the option that sets it (None: no option moves it)."""

    port: int
    process: str
    option: str | None = None
    """A command-line option (`--port`: given as `--port 8081`) or a variable (`PORT`: `PORT=8081`)."""

    def moved_to(self, port: int) -> str:
        """How the user gives `port` instead: `--port 8081`, or `PORT=8081` for a variable (`port 8081` with none)."""
        if self.option is None:
            return f"port {port}"
        return f"{self.option} {port}" if self.option.startswith("-") else f"{self.option}={port}"


def check_ports(claims: list[PortClaim], unclaimed: frozenset[int] = frozenset()) -> None:
    """ConfigurationError listing every claimed port that is in use or claimed by two processes; nothing otherwise.
    A free port it suggests instead is free now and none the run binds, `unclaimed` (bound, not checked) included."""
    counts = Counter(claim.port for claim in claims)
    taken = {claim.port for claim in claims} | set(unclaimed)
    problems, moves, in_use = [], [], False
    for claim in claims:
        where = f"port {claim.port} ({claim.process}" + (f", {claim.option})" if claim.option else ")")
        if counts[claim.port] > 1:
            others = [c.process for c in claims if c.port == claim.port and c is not claim]
            problems.append(f"{where} is also given to {', '.join(others)}")
        elif not port_free(claim.port):
            holder, in_use = port_holder(claim.port), True
            problems.append(f"{where} is in use" + (f" by {holder}" if holder else ""))
        else:
            continue
        if claim.option and (free := next_free_port(claim.port, avoid=taken)):
            taken.add(free)
            moves.append(claim.moved_to(free))
    if not problems:
        return
    fixes = ["stop what holds it (`make down` stops a stack started from this directory)"] if in_use else []
    if moves:
        fixes.append("pick other ports, e.g. " + " ".join(moves))
    fix = " or ".join(fixes) or "give each process its own port"
    raise ConfigurationError("; ".join(problems) + f". Nothing was started: {fix}")


def next_free_port(port: int, avoid: set[int], tries: int = 100) -> int | None:
    """The first port above `port` that is free now and not in `avoid`."""
    for candidate in range(port + 1, min(port + 1 + tries, 65536)):
        if candidate not in avoid and port_free(candidate):
            return candidate
    return None


def port_holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """`pid N (command line)` of a process listening on `port`, from /proc; None where that cannot be seen (another
    user's process without the rights, another OS, another network namespace)."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid_dir in proc.iterdir():
        if pid_dir.name.isdigit() and wanted & set(_links(pid_dir / "fd")):
            try:
                command = " ".join(
                    (pid_dir / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ").split()
                )
            except OSError:
                command = "?"
            return f"pid {pid_dir.name} ({command[:120]})"
    return None


def _links(fd_dir: Path) -> list[str]:
    """Where each of a process's file descriptors points; those that cannot be read (no rights, closed) left out."""
    try:
        entries = list(fd_dir.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            found.append(str(entry.readlink()))
        except OSError:
            continue
    return found


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    """The socket inodes listening on `port` (IPv4 and IPv6), from /proc/net/tcp and tcp6."""
    found = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found
