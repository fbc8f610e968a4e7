"""Where a gunicorn service's workers keep their prometheus-client multiprocess files.

Each worker memory-maps its files and writes every sample through the map: on a full disk, the first write to a page
the filesystem cannot back kills the worker with SIGBUS, and every worker that replaces it dies the same way. So the
files live on a memory filesystem apart from the run directory's disk: the user's own `$XDG_RUNTIME_DIR` where it is
one (other users cannot fill it), else `/dev/shm`. The directory is made by `tempfile.mkdtemp` (0700, a name no one
can guess) at the service's first start, emptied at each restart and removed at the stop; it names its link in a
file, `OWNER`, and is reused or removed only through that link. The service is given the link,
`<run dir>/prometheus-<service>`. Without a memory filesystem that path is the directory itself, on the run
directory's disk."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from services.common.private import private_dir, write_private

SHARED_MEMORY = Path("/dev/shm")
MEMORY_TYPES = ("tmpfs", "ramfs")
"""Filesystems in memory: `$XDG_RUNTIME_DIR` is used only on one (it is on disk in some containers)."""
PREFIX = "serving-metrics-"
OWNER = ".link"
"""The file in a metrics directory holding the path of the link it belongs to."""


def metrics_link(run_dir: Path, name: str) -> Path:
    """The path service `name` of the stack under `run_dir` is given for its files (`renew` makes what it names)."""
    return run_dir.resolve() / f"prometheus-{name}"


def renew(link: Path) -> Path:
    """An empty directory at `link` or linked from it (counts of a dead worker or an earlier run would add up with the
    new ones): the one it links to, emptied, where that is ours; else a new one. Returns the directory."""
    current = _linked(link)
    if current is not None:
        for entry in current.iterdir():
            if entry.name == OWNER:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        return current
    remove_metrics_dir(link)
    base = memory_fs()
    if base is None:
        return private_dir(link)
    made = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{link.name}-", dir=base))
    try:
        write_private(made / OWNER, str(link))
        private_dir(link.parent)
        link.symlink_to(made, target_is_directory=True)
    except OSError:
        shutil.rmtree(made, ignore_errors=True)
        raise
    return made


def remove_metrics_dir(link: Path) -> None:
    """Remove `link` and the directory it names where that is ours (`_linked`; any other target is left alone), or
    the directory at `link` itself."""
    if link.is_symlink():
        target = _linked(link)
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)
        link.unlink(missing_ok=True)
    elif link.is_dir():
        shutil.rmtree(link, ignore_errors=True)


def remove_all(run_dir: Path) -> None:
    """Remove every metrics directory of the stack under `run_dir` (its processes stopped)."""
    for link in run_dir.glob("prometheus-*"):
        if link.is_symlink():
            remove_metrics_dir(link)


def memory_fs() -> Path | None:
    """The memory filesystem for the files: `$XDG_RUNTIME_DIR` where it is this user's private directory, else
    `/dev/shm` where it is writable, else None."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _private_of_ours(Path(runtime)) and filesystem(Path(runtime)) in MEMORY_TYPES:
        return Path(runtime)
    if SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK | os.X_OK):
        return SHARED_MEMORY
    return None


def filesystem(path: Path) -> str | None:
    """The type of the filesystem `path` is on (`/proc/self/mountinfo`: the longest mount point above it); None where
    that cannot be read."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    resolved, found, longest = path.resolve(), None, -1
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4]))  # \040: a space
        if (point == resolved or point in resolved.parents) and len(point.parts) > longest:
            found, longest = rest.split()[0], len(point.parts)
    return found


def _linked(link: Path) -> Path | None:
    """The directory `link` names when it is one `renew` made for this very link: a directory of ours, named so, on
    a memory filesystem, whose `OWNER` file names `link` (a copied run directory's link names another's)."""
    if not link.is_symlink():
        return None
    target = Path(os.readlink(link))
    bases = {base for base in (memory_fs(), SHARED_MEMORY) if base is not None}
    if target.parent not in bases or not target.name.startswith(PREFIX) or not _private_of_ours(target):
        return None
    try:
        return target if (target / OWNER).read_text() == str(link) else None
    except OSError:
        return None


def _private_of_ours(path: Path) -> bool:
    try:
        status = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid() and status.st_mode & 0o077 == 0
