"""`Launcher`: starts the processes of one run, each in its own process group and recorded in the run directory,
waits for each to be ready, and stops the ones it started (on a failure, on Ctrl-C, on `serving down`); the
supervisor (`supervise`) starts them again through it when they die. In the background, a process's output goes to
its log file through `observability.logfile`, which rotates it by size (`LogFileSettings`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from services.common.errors import ConfigurationError
from services.common.private import PRIVATE_UMASK, private_dir, private_file
from services.launcher.groups import stop_group
from services.launcher.ports import PortClaim, check_ports
from services.launcher.records import remove_record, write_record
from services.launcher.settings import LogFileSettings
from services.launcher.spec import ProcessSpec

DRAIN_TIMEOUT = 10.0
"""Seconds a process that exited before it was ready is given for the rest of its group (its log writer, its
workers) to end, so that its log holds its last lines when it is read."""


class Launcher:
    """Starts processes under one run directory (pid files, metadata, logs) and stops the ones it started."""

    def __init__(self, run_dir: Path, log_files: LogFileSettings | None = None):
        self.run_dir = run_dir
        self.log_files = log_files or LogFileSettings()
        self.procs: list[tuple[ProcessSpec, subprocess.Popen]] = []

    def log_path(self, name: str) -> Path:
        """One log directory for the whole run (written when detached): `serving logs` merges it."""
        return self.run_dir / "logs" / f"{name}.log"

    def start(self, spec: ProcessSpec, *, detach: bool) -> subprocess.Popen:
        """Start `spec` in a new process group and record its pid and metadata; detached, its output goes to its log
        file (rotated by size), else to this terminal. Refuses a port already in use. Starting a name again (a
        restart) replaces it. The run directory and its logs are private (0700) and the process runs under
        `PRIVATE_UMASK`: the state, stores, secrets and logs it writes there are its owner's alone."""
        check_ports([PortClaim(port, spec.name) for port in spec.ports])
        private_dir(self.run_dir)
        private_dir(self.log_path(spec.name).parent)
        if spec.prepare:
            spec.prepare()
        env = {**os.environ, "LOG_SERVICE": spec.name, **spec.env}
        if detach:
            private_file(self.log_path(spec.name))  # there, and the owner's alone, before the process writes a line
            proc = subprocess.Popen(
                self._logged(spec.name, spec.argv),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                umask=PRIVATE_UMASK,
            )
        else:
            proc = subprocess.Popen(spec.argv, env=env, start_new_session=True, umask=PRIVATE_UMASK)
        write_record(self.run_dir, spec, proc, self.log_path(spec.name) if detach else None)
        names = [started.name for started, _ in self.procs]
        if spec.name in names:  # a restart keeps its place in the stop order
            self.procs[names.index(spec.name)] = (spec, proc)
        else:
            self.procs.append((spec, proc))
        return proc

    def _logged(self, name: str, argv: list[str]) -> list[str]:
        """`argv` behind the log writer: it becomes the command, its output written to its rotating log file."""
        settings = self.log_files
        path = str(self.log_path(name))
        limits = ["--max-bytes", str(settings.max_bytes), "--backups", str(settings.backups)]
        return [sys.executable, "-m", "observability.logfile", path, *limits, "--", *argv]

    def wait_ready(self, spec: ProcessSpec, proc: subprocess.Popen, timeout: float) -> None:
        """Poll `spec.ready_url` until it answers 200; raise, with the log's reason, if the process exits first or
        `timeout` passes."""
        if spec.ready_url is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                stop_group(proc.pid, DRAIN_TIMEOUT)  # its log writer ends once the last lines are in the file
                raise ConfigurationError(
                    f"{spec.name} exited with code {proc.returncode} before it was ready" + self._log_hint(spec)
                )
            try:
                if httpx.get(spec.ready_url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
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
        """Stop what this launcher started, last first, and remove its records."""
        for spec, proc in reversed(self.procs):
            stop_group(proc.pid, spec.stop_timeout)
            remove_record(self.run_dir, spec.name)
            if spec.cleanup:
                spec.cleanup()
        self.procs.clear()
