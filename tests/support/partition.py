"""A network partition between simulated hosts of one machine, with real packet drops (nftables, as root): every TCP
packet to or from one address and port is dropped, both ways of the link then hang as over a cut cable (no refusal, no
reset), until the partition heals (its table deleted).

On loopback every connection's source address is 127.0.0.1 whatever host a process simulates (the kernel picks the
route's `src`), so a link is cut by its destination, the server's address and port: every client of that port is cut
off from it, none other. `with Partition() as cut: cut.link(address, port)`; the table goes whatever happens."""

from __future__ import annotations

import os
import shutil
import subprocess


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


class Partition:
    """One nftables table of this process (`serving_partition_<pid>`) dropping the links asked for."""

    def __init__(self):
        self.table = f"serving_partition_{os.getpid()}"
        self.links: list[tuple[str, int]] = []

    def __enter__(self) -> Partition:
        nft("add", "table", "inet", self.table)
        nft("add", "chain", "inet", self.table, "output", "{ type filter hook output priority 0; }")
        return self

    def link(self, address: str, port: int) -> None:
        """Drop every packet to `address:port` and every packet from it (answers on connections already open)."""
        for rule in (["ip", "daddr", address, "tcp", "dport"], ["ip", "saddr", address, "tcp", "sport"]):
            nft("add", "rule", "inet", self.table, "output", *rule, str(port), "drop")
        self.links.append((address, port))

    def heal(self) -> None:
        if self.links is not None:
            subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True, timeout=10)
            self.links = None

    def __exit__(self, *exc) -> None:
        self.heal()
