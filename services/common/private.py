"""Files and directories only their owner may read: the run directory, its databases and its secrets.

The run directory holds the deployment state, the MLflow store, the admin token and the saved options of `serving
up` (a PostgreSQL URL may carry a password). Every process the launcher starts runs under `PRIVATE_UMASK`, so what
they create there is theirs alone; the directories and files the project creates itself are made private here, and
an existing one that others could read is narrowed."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

PRIVATE_UMASK = 0o077
"""The umask of the stack's processes: directories they create are 0700, files 0600."""
DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner may list or enter (0700), made with its missing parents (0700 too:
    `made_private`) if missing."""
    made_private(path)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        path.chmod(DIR_MODE)
    return path


def made_private(path: Path) -> Path:
    """`path` as a directory; the ones missing on the way to it (it included) made 0700, whatever the umask; the ones
    that exist left as they are (a directory the user chose keeps its modes)."""
    missing = [parent for parent in [path, *path.parents] if not parent.exists()]
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # another process made it first
        directory.chmod(DIR_MODE)  # mkdir's mode passes through the umask
    return path


def open_private(path: Path, flags: int) -> int:
    """A descriptor of `path` opened with `flags` (os.O_*; with os.O_CREAT it is made if missing), the file 0600."""
    descriptor = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(descriptor, FILE_MODE)
    except OSError:
        os.close(descriptor)
        raise
    return descriptor


def private_file(path: Path) -> Path:
    """`path`, an empty file if missing, readable and writable by its owner only (0600)."""
    os.close(open_private(path, os.O_WRONLY | os.O_CREAT))
    return path


def write_private(path: Path, text: str) -> Path:
    """`text` into `path`, a file of mode 0600 from its first byte on (replacing what it held)."""
    private_file(path)
    path.write_text(text)
    return path


def narrow(path: Path) -> None:
    """An existing file made 0600 (a database or a secret left readable by a run before); a missing one is left so."""
    if path.is_file() and path.stat().st_mode & 0o777 != FILE_MODE:
        path.chmod(FILE_MODE)


def private_tree(path: Path) -> Path:
    """`path` and everything under it made its owner's alone: group and other permission bits removed, the owner's
    kept (an executable stays executable). For what is copied in with its source's modes (`shutil.copytree`)."""
    for entry in [path, *path.rglob("*")]:
        mode = entry.lstat().st_mode
        if not entry.is_symlink() and mode & 0o077:
            entry.chmod(mode & 0o700)
    return path


def ensure_secret(path: Path) -> bool:
    """A random token written to `path` (0600, in a private directory) unless the file exists; whether it was
    written here (False: it existed, or another process wrote it first)."""
    private_dir(path.parent)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")
    return True
