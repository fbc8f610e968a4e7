"""What the run directory records of each started process: `<name>.pid` (its process group) and `<name>.json`
(pid, ports, readiness URL, drain time, start time, log file, and what the supervisor says of it: phase, restarts,
last restart reason, failed probes). Any shell can then list and stop what a `serving` command started.

The supervisor has a record too (`supervisor`); `stop_recorded` stops it first, by its pid alone (in the foreground
it shares its process group with the shell or `make` that started it), so that nothing restarts what is being
stopped."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from services.common.private import write_private
from services.launcher.groups import group_alive, pid_alive, stop_group, stop_process
from services.launcher.spec import ProcessSpec

SUPERVISOR = "supervisor"
log = logging.getLogger(__name__)


def _replace(path: Path, text: str) -> None:
    """Replace `path` atomically (`serving status` and `serving down` may read it while the supervisor writes it: a
    pid file read between its truncation and its write was empty) with a file only its owner may read."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_private(tmp, text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _unrecorded(name: str, error: OSError) -> None:
    """A record that could not be written (a full disk): the process runs on, `serving status` shows it as it was."""
    log.warning("the record of %s was not written (%s); it runs on, `serving status` shows its last one", name, error)


def write_record(run_dir: Path, spec: ProcessSpec, proc: subprocess.Popen, log: Path | None) -> None:
    """Record a process just started (`log`: where its output goes; None: a terminal)."""
    meta = {
        "name": spec.name,
        "pid": proc.pid,
        "ports": spec.ports,
        "ready_url": spec.ready_url,
        "stop_timeout": spec.stop_timeout,
        "started_at": time.time(),
        "log": str(log) if log else None,
    }
    write_meta(run_dir, meta)


def write_meta(run_dir: Path, meta: dict) -> None:
    """A record from its metadata (`name`, `pid`, ...): the pid file and the JSON file; one that cannot be written is
    said (`_unrecorded`): the process it records runs all the same."""
    try:
        _replace(run_dir / f"{meta['name']}.pid", str(meta["pid"]))
        _replace(run_dir / f"{meta['name']}.json", json.dumps(meta) + "\n")
    except OSError as error:
        _unrecorded(meta["name"], error)


def read_meta(run_dir: Path, name: str) -> dict:
    """A process's record; only its name when it has none (or a broken one)."""
    try:
        return json.loads((run_dir / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {"name": name}


def update_record(run_dir: Path, name: str, fields: dict) -> None:
    """Add `fields` to a process's record (the supervisor's view of it); one that cannot be written is said."""
    try:
        _replace(run_dir / f"{name}.json", json.dumps(read_meta(run_dir, name) | fields) + "\n")
    except OSError as error:
        _unrecorded(name, error)


def remove_record(run_dir: Path, name: str) -> None:
    """Forget a process that has stopped."""
    (run_dir / f"{name}.pid").unlink(missing_ok=True)
    (run_dir / f"{name}.json").unlink(missing_ok=True)


def _pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(name: str, pid: int | None) -> bool:
    if pid is None:
        return False
    return pid_alive(pid) if name == SUPERVISOR else group_alive(pid)


Stopping = Callable[[str, int, float], None]
"""Told before a process is stopped: its name, pid and the seconds it gets before SIGKILL."""


def stop_recorded(run_dir: Path, timeout: float = 30.0, stopping: Stopping | None = None) -> list[str]:
    """Stop every process recorded under the run directory, the supervisor first (it stops the stack's processes
    itself, each with its own drain time, within `timeout` x 4); each other one gets its own drain time (its spec's
    `stop_timeout`, recorded when it started), at most `timeout`. `stopping` hears of each before it waits on it.
    Returns the names stopped."""
    stopped = []
    pid = _pid(run_dir / f"{SUPERVISOR}.pid")
    if pid is not None and pid_alive(pid):
        if stopping:
            stopping(SUPERVISOR, pid, timeout * 4)
        if stop_process(pid, timeout * 4):
            stopped.append(SUPERVISOR)
    remove_record(run_dir, SUPERVISOR)
    for pidfile in sorted(run_dir.glob("*.pid")):
        pid = _pid(pidfile)
        if pid is not None and group_alive(pid):
            drain = min(timeout, read_meta(run_dir, pidfile.stem).get("stop_timeout", timeout))
            if stopping:
                stopping(pidfile.stem, pid, drain)
            stop_group(pid, drain)
            stopped.append(pidfile.stem)
        remove_record(run_dir, pidfile.stem)
    return stopped


def recorded(run_dir: Path) -> dict[str, bool]:
    """Each process with a pid file under `run_dir`, and whether it (its process group) is still alive."""
    return {pidfile.stem: _alive(pidfile.stem, _pid(pidfile)) for pidfile in sorted(run_dir.glob("*.pid"))}


def process_status(run_dir: Path) -> list[dict]:
    """Every process recorded under `run_dir`: its record (name, pid, ports, readiness URL, log file, restarts), its
    state and uptime."""
    now = time.time()
    alive = recorded(run_dir)
    supervised = alive.get(SUPERVISOR, False)
    rows = []
    for name, running in alive.items():
        meta = read_meta(run_dir, name)
        started = meta.get("started_at")
        rows.append(
            meta
            | {
                "state": state(meta, running, supervised),
                "uptime_seconds": round(now - started) if started and running else None,
            }
        )
    return rows


def state(meta: dict, alive: bool, supervised: bool) -> str:
    """running | starting | wedged (its last liveness probe failed) | restarting (waiting out its backoff) | failed
    (restarted too often: left down) | dead (not running, and nothing restarts it). What the supervisor wrote counts
    only while it runs."""
    phase = meta.get("phase") if supervised else None
    if phase in ("backoff", "failed"):
        return "restarting" if phase == "backoff" else "failed"
    if not alive:
        return "dead"
    if phase and meta.get("probe_failures"):
        return "wedged"
    return "starting" if phase == "starting" else "running"


STACK_INFO = "stack.json"
"""What `serving up` writes into the run directory once its stack is ready (`services.stacks.info`): the model, the
knobs, the addresses to call."""


def read_stack_info(run_dir: Path) -> dict:
    """The stack info `serving up` wrote into `run_dir`; {} when no stack wrote it."""
    path = run_dir / STACK_INFO
    return json.loads(path.read_text()) if path.is_file() else {}
