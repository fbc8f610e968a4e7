"""A network partition between simulated hosts of one machine, with real packet drops (nftables, as root): every TCP
packet to or from one address and port is dropped, both ways of the link then hang as over a cut cable (no refusal, no
reset), until the partition heals (its table deleted).

On loopback every connection's source address is 127.0.0.1 whatever host a process simulates (the kernel picks the
route's `src`), so a link is cut by its destination, the server's address and port: every client of that port is cut
off from it, none other. `with Partition() as cut: cut.link(address, port)`; the table goes whatever happens.

To cut one client alone (`cut.client(pid, address, port)`), its processes move into a cgroup (v2) of their own: the
sockets they open from then on are dropped by that cgroup (nftables' `socket cgroupv2`), those already open by their
port on the client's side; healing moves them back."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from services.launcher.reload import workers

CGROUPS = Path("/sys/fs/cgroup")
"""Where nftables looks up the cgroup a `socket cgroupv2` rule names."""
_names = itertools.count()


def nft(*commands: str) -> None:
    done = subprocess.run(["nft", *commands], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"nft {' '.join(commands)} failed: {done.stderr.strip()}")


def available() -> str | None:
    """Why partitions cannot be made here, or None."""
    if shutil.which("nft") is None:
        return "no nft (apt-get install nftables; `make system-deps` does)"
    if os.geteuid() != 0:
        return "nftables rules need root"
    return None


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted, writable (`/sys/fs/cgroup/unified` beside v1, or `/sys/fs/cgroup`),
    if it is."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[2] == "cgroup2" and Path(fields[1]).is_relative_to(CGROUPS):
            return Path(fields[1]) if "rw" in fields[3].split(",") and os.access(fields[1], os.W_OK) else None
    return None


def tree(pid: int) -> list[int]:
    """`pid` and every process descended from it now."""
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += workers(found[-1])
    return found


def local_ports(pids: Iterable[int], address: str, port: int) -> set[int]:
    """The local ports of the TCP connections to `address:port` that the processes `pids` hold, connected or on
    their way (SYN sent)."""
    wanted = set(pids)
    done = subprocess.run(
        ["ss", "-tnpH", "state", "connected", "dst", f"{address}:{port}"], capture_output=True, text=True, timeout=10
    )
    ports = set()
    for line in done.stdout.splitlines():  # [State] Recv-Q Send-Q Local Peer users:(("name",pid=N,fd=M),...)
        addresses, _, users = line.partition("users:")
        owners = {int(pid) for pid in re.findall(r"pid=(\d+)", users)}
        if owners & wanted:
            ports.add(int(addresses.split()[-2].rsplit(":", 1)[1]))
    return ports


def cgroup_of(pid: int) -> str:
    """The cgroup (v2) of `pid`, as a path under the hierarchy's mount."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return "/"


class Partition:
    """One nftables table of this process (`serving_partition_<pid>`) dropping the links asked for."""

    def __init__(self):
        self.table = f"serving_partition_{os.getpid()}"
        self.links: list[tuple[str, int]] | None = []
        self.cgroups: list[Path] = []  # made by `client`, removed by `heal`
        self.origins: dict[int, str] = {}  # each moved process's cgroup before the move

    def __enter__(self) -> Partition:
        nft("add", "table", "inet", self.table)
        nft("add", "chain", "inet", self.table, "output", "{ type filter hook output priority 0; }")
        return self

    def link(self, address: str, port: int) -> None:
        """Drop every packet to `address:port` and every packet from it (answers on connections already open)."""
        self._drop(f"ip daddr {address} tcp dport {port}")
        self._drop(f"ip saddr {address} tcp sport {port}")
        assert self.links is not None
        self.links.append((address, port))

    def client(self, pid: int, address: str, port: int) -> None:
        """Drop every packet between `address:port` and process `pid` with its descendants (those it starts while cut
        too), no other client's: one client host cut off from a server the others still reach."""
        mount = cgroup2_mount()
        if mount is None:
            raise RuntimeError("no cgroup v2 hierarchy under /sys/fs/cgroup to cut one client off by")
        cgroup = mount / f"{self.table}_{next(_names)}"
        cgroup.mkdir()
        self.cgroups.append(cgroup)
        moved: set[int] = set()
        while missing := set(tree(pid)) - moved:  # until none forked meanwhile stays behind
            for member in missing:
                with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                    self.origins.setdefault(member, cgroup_of(member))
                    (cgroup / "cgroup.procs").write_text(str(member))
            moved |= missing
        name = f'"{cgroup.relative_to(CGROUPS)}"'
        for level in range(1, 9):  # counted from the kernel's root, which a cgroup namespace hides: only one matches
            self._drop(f"socket cgroupv2 level {level} {name} ip daddr {address} tcp dport {port}")
        cut: set[int] = set()
        for _ in range(2):  # sockets made before the move keep their cgroup: cut by port, again for one connecting
            for local in local_ports(moved, address, port) - cut:
                self._drop(f"ip daddr {address} tcp dport {port} tcp sport {local}")
                self._drop(f"ip saddr {address} tcp sport {port} tcp dport {local}")
                cut.add(local)
            time.sleep(0.5)
        assert self.links is not None
        self.links.append((address, port))

    def _drop(self, match: str) -> None:
        """A rule dropping the output packets that `match` (nft's words, split on spaces; a quoted name has none)."""
        nft("add", "rule", "inet", self.table, "output", *match.split(), "drop")

    def heal(self) -> None:
        if self.links is not None:
            subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True, timeout=10)
            self.links = None
        mount, cgroups, self.cgroups = cgroup2_mount(), self.cgroups, []
        for cgroup in cgroups:  # its processes (those started while cut too) back where they were
            try:
                for _ in range(50):
                    members = [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
                    if not members:
                        break
                    for member in members:
                        origin = Path(str(mount) + self.origins.get(member, "/"))
                        with contextlib.suppress(ProcessLookupError):
                            (origin / "cgroup.procs").write_text(str(member))
            finally:
                with contextlib.suppress(OSError):
                    cgroup.rmdir()

    def __exit__(self, *exc) -> None:
        self.heal()
