"""Small filesystems of a test's own, to fill: a tmpfs mounted on a directory (root can mount, as developers and CI
are) and a file that takes its last byte."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def tmpfs(directory: Path, options: str) -> Iterator[Path]:
    """`directory` (made if missing) on a tmpfs mounted with `options` (`size=16m,mode=0700`), unmounted after."""
    directory.mkdir(mode=0o700, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def fill(junk: Path) -> str:
    """The disk under `junk` filled to its last byte (appended to `junk`); the error that said it was full."""
    try:
        with open(junk, "ab") as filling:
            while True:
                filling.write(b"j" * 4096)
                filling.flush()
    except OSError as full:
        return full.strerror
