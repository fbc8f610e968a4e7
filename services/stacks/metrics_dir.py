"""Where a gunicorn service's workers keep their prometheus-client multiprocess files.

Each worker memory-maps its files and writes every sample through the map: on a full disk, the first write to a page
the filesystem cannot back kills the worker with SIGBUS, and every worker that replaces it dies the same way. So the
files live on the memory filesystem `/dev/shm` where there is one, apart from the run directory's disk, in a directory
made by `tempfile.mkdtemp` (0700, a name no one can guess) before each start of the service; the service is given the
link to it, `<run dir>/prometheus-<service>`. Without a writable `/dev/shm` that path is the directory itself, on the
run directory's disk."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from services.common.private import private_dir

MEMORY_FS = Path("/dev/shm")
PREFIX = "serving-metrics-"


def metrics_link(run_dir: Path, name: str) -> Path:
    """The path service `name` of the stack under `run_dir` is given for its files (`renew` makes what it names)."""
    return run_dir.resolve() / f"prometheus-{name}"


def renew(link: Path) -> Path:
    """A new empty directory at `link` or linked from it (counts of a dead worker or an earlier run would add up with
    the new ones); what it held before is removed. Returns the directory."""
    remove_metrics_dir(link)
    if not (MEMORY_FS.is_dir() and os.access(MEMORY_FS, os.W_OK | os.X_OK)):
        return private_dir(link)
    made = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{link.name}-", dir=MEMORY_FS))
    private_dir(link.parent)
    link.symlink_to(made, target_is_directory=True)
    return made


def remove_metrics_dir(link: Path) -> None:
    """Remove `link` and the directory it names: a directory of ours under `MEMORY_FS` made by `metrics_dir` (any other
    target is left alone), or the directory at `link` itself."""
    if link.is_symlink():
        target = Path(os.readlink(link))
        if target.parent == MEMORY_FS and target.name.startswith(PREFIX) and _ours(target):
            shutil.rmtree(target, ignore_errors=True)
        link.unlink(missing_ok=True)
    elif link.is_dir():
        shutil.rmtree(link, ignore_errors=True)


def _ours(path: Path) -> bool:
    try:
        status = path.lstat()
    except OSError:
        return False
    return os.path.isdir(path) and not path.is_symlink() and status.st_uid == os.getuid()
