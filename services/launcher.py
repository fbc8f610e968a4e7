"""Start, watch and stop the processes of a stack (gunicorn, tritonserver, ...).

Each process runs in its own process group, so stopping the group also stops what it spawned (gunicorn workers,
Triton's Python-backend stubs). Pid files under the run directory let `serving down` find everything `serving up`
started, from another shell.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from services.common.errors import ConfigurationError

RUN_DIR = Path(os.environ.get("SERVING_RUN_DIR", "run"))


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready_url: str | None = None
    ports: list[int] = field(default_factory=list)
    stop_timeout: float = 30.0
    explain: Callable[[str], str | None] | None = None
    """Turns the process's log into a readable reason when it fails to start."""


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Launcher:
    def __init__(self, run_dir: Path = RUN_DIR):
        self.run_dir = run_dir
        self.procs: list[tuple[ProcessSpec, subprocess.Popen]] = []

    def log_path(self, name: str) -> Path:
        """One log directory for the whole run: `serving logs` merges it."""
        return self.run_dir / "logs" / f"{name}.log"

    def start(self, spec: ProcessSpec, *, detach: bool) -> subprocess.Popen:
        for port in spec.ports:
            if not port_free(port):
                raise ConfigurationError(
                    f"port {port} for {spec.name} is in use: is a stack already up? (`make down`) "
                    "or choose another port"
                )
        self.log_path(spec.name).parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "LOG_SERVICE": spec.name, **spec.env}
        if detach:  # the child keeps its own copy of the log file's descriptor
            with open(self.log_path(spec.name), "ab") as output:
                proc = subprocess.Popen(
                    spec.argv, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
                )
        else:
            proc = subprocess.Popen(spec.argv, env=env, start_new_session=True)
        (self.run_dir / f"{spec.name}.pid").write_text(str(proc.pid))
        meta = {
            "name": spec.name,
            "pid": proc.pid,
            "ports": spec.ports,
            "ready_url": spec.ready_url,
            "started_at": time.time(),
            "log": str(self.log_path(spec.name)) if detach else None,
        }
        (self.run_dir / f"{spec.name}.json").write_text(json.dumps(meta) + "\n")
        self.procs.append((spec, proc))
        return proc

    def wait_ready(self, spec: ProcessSpec, proc: subprocess.Popen, timeout: float) -> None:
        if spec.ready_url is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ConfigurationError(
                    f"{spec.name} exited with code {proc.returncode} before it was ready" + self._log_hint(spec)
                )
            try:
                if httpx.get(spec.ready_url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise ConfigurationError(
            f"{spec.name} was not ready at {spec.ready_url} after {timeout:.0f}s" + self._log_hint(spec)
        )

    def start_ready(self, spec: ProcessSpec, *, detach: bool, timeout: float) -> subprocess.Popen:
        """Start `spec` and wait until it is ready; on failure stop everything this launcher started and raise."""
        try:
            proc = self.start(spec, detach=detach)
            self.wait_ready(spec, proc, timeout)
        except Exception:
            self.stop_all()
            raise
        return proc

    def _log_hint(self, spec: ProcessSpec) -> str:
        path = self.log_path(spec.name)
        if not path.is_file():
            return ""
        text = path.read_text(errors="replace")
        reason = spec.explain(text) if spec.explain else None
        if reason:
            return f":\n{reason}\n(full log: {path})"
        return f"; last lines of {path}:\n" + "\n".join(text.splitlines()[-25:])

    def stop_all(self) -> None:
        for spec, proc in reversed(self.procs):
            stop_group(proc.pid, spec.stop_timeout)
            (self.run_dir / f"{spec.name}.pid").unlink(missing_ok=True)
            (self.run_dir / f"{spec.name}.json").unlink(missing_ok=True)
        self.procs.clear()

    def wait_foreground(self) -> int:
        """Block until a process exits or we are told to stop; then stop everything. Returns an exit code."""
        stop = {"signal": None}

        def handler(signum, frame):
            stop["signal"] = signum

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        try:
            while stop["signal"] is None:
                for spec, proc in self.procs:
                    if proc.poll() is not None:
                        print(f"{spec.name} exited with code {proc.returncode}; stopping the stack", file=sys.stderr)
                        return proc.returncode or 1
                time.sleep(0.5)
            return 0
        finally:
            self.stop_all()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def stop_group(pgid: int, timeout: float) -> None:
    """SIGTERM the process group (graceful drain), then SIGKILL whatever is left after `timeout`."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _alive(pgid)  # reap the leader if it is our child
        if not _group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while _group_alive(pgid) and _alive(pgid):
        time.sleep(0.05)


def stop_recorded(run_dir: Path = RUN_DIR, timeout: float = 30.0) -> list[str]:
    """Stop every process group recorded under the run directory; returns the names stopped."""
    stopped = []
    for pidfile in sorted(run_dir.glob("*.pid")):
        try:
            pid = int(pidfile.read_text().strip())
        except ValueError:
            pidfile.unlink()
            continue
        if _group_alive(pid):
            stop_group(pid, timeout)
            stopped.append(pidfile.stem)
        pidfile.unlink(missing_ok=True)
        pidfile.with_suffix(".json").unlink(missing_ok=True)
    return stopped


def recorded(run_dir: Path = RUN_DIR) -> dict[str, bool]:
    result = {}
    for pidfile in sorted(run_dir.glob("*.pid")):
        try:
            result[pidfile.stem] = _group_alive(int(pidfile.read_text().strip()))
        except ValueError:
            result[pidfile.stem] = False
    return result


def process_status(run_dir: Path = RUN_DIR) -> list[dict]:
    """Every process `serving up` recorded: name, pid, state, uptime, ports, readiness URL, log file."""
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
