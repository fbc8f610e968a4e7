"""What the run directory records of each started process: `<name>.pid` (its process group) and `<name>.json`
(pid, ports, readiness URL, start time, log file). Any shell can then list and stop what a `serving` command
started."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from services.launcher.groups import group_alive, stop_group
from services.launcher.spec import ProcessSpec


def write_record(run_dir: Path, spec: ProcessSpec, proc: subprocess.Popen, log: Path | None) -> None:
    """Record a process just started (`log`: where its output goes; None: a terminal)."""
    (run_dir / f"{spec.name}.pid").write_text(str(proc.pid))
    meta = {
        "name": spec.name,
        "pid": proc.pid,
        "ports": spec.ports,
        "ready_url": spec.ready_url,
        "started_at": time.time(),
        "log": str(log) if log else None,
    }
    (run_dir / f"{spec.name}.json").write_text(json.dumps(meta) + "\n")


def remove_record(run_dir: Path, name: str) -> None:
    """Forget a process that has stopped."""
    (run_dir / f"{name}.pid").unlink(missing_ok=True)
    (run_dir / f"{name}.json").unlink(missing_ok=True)


def stop_recorded(run_dir: Path, timeout: float = 30.0) -> list[str]:
    """Stop every process group recorded under the run directory; returns the names stopped."""
    stopped = []
    for pidfile in sorted(run_dir.glob("*.pid")):
        try:
            pid = int(pidfile.read_text().strip())
        except ValueError:
            pidfile.unlink()
            continue
        if group_alive(pid):
            stop_group(pid, timeout)
            stopped.append(pidfile.stem)
        remove_record(run_dir, pidfile.stem)
    return stopped


def recorded(run_dir: Path) -> dict[str, bool]:
    """Each process with a pid file under `run_dir`, and whether its process group is still alive."""
    result = {}
    for pidfile in sorted(run_dir.glob("*.pid")):
        try:
            result[pidfile.stem] = group_alive(int(pidfile.read_text().strip()))
        except ValueError:
            result[pidfile.stem] = False
    return result


def process_status(run_dir: Path) -> list[dict]:
    """Every process recorded under `run_dir`: its record (name, pid, ports, readiness URL, log file), state and
    uptime."""
    now = time.time()
    rows = []
    for name, alive in recorded(run_dir).items():
        meta_file = run_dir / f"{name}.json"
        meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {"name": name}
        started = meta.get("started_at")
        rows.append(
            meta
            | {
                "state": "running" if alive else "dead",
                "uptime_seconds": round(now - started) if started and alive else None,
            }
        )
    return rows
