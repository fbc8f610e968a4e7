"""The supervisor: watches every process a launcher started and starts again the ones that die or wedge.

A process that exits (or is killed) is restarted after a backoff that doubles with each restart in a sliding window,
up to a cap (`SupervisorSettings`); past the cap it is left down and reported `failed`. A process with a liveness
check (`ProcessSpec.liveness`: Triton's is a small inference with a deadline, since its `/v2/health/live` answers
200 while every inference fails or hangs) is killed and restarted after several failed checks in a row. Before a
restart, what is left of the process group (gunicorn's workers after their master, Triton's Python stubs, a wedged
server) is stopped, so the ports are free again. Its view of each process (phase, restarts, last reason, failed
probes) goes into the process's record, for `serving status`.

Our own loop rather than supervisord or circus: the launcher already starts each process in its own group with the
records `serving down` and `serving status` read; a second tool would need its own configuration generated from the
same specs, its own pid and state files, and could not run a check written in Python against the stack's own model.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from services.common.errors import ServingError
from services.launcher.groups import stop_group
from services.launcher.launch import Launcher
from services.launcher.records import update_record
from services.launcher.restarts import RestartHistory, exit_reason
from services.launcher.settings import SupervisorSettings
from services.launcher.spec import ProcessSpec

log = logging.getLogger("supervisor")


def http_ready(url: str, timeout: float) -> None:
    """Raise unless `url` answers 200 within `timeout` seconds."""
    status = httpx.get(url, timeout=timeout).status_code
    if status != 200:
        raise ConnectionError(f"{url} answered {status}")


@dataclass
class Watched:
    """One supervised process and what the supervisor knows of it."""

    spec: ProcessSpec
    proc: subprocess.Popen
    restarts: RestartHistory
    phase: str = "running"
    """starting (waiting for readiness) | running | backoff (waiting to start again) | failed (left down)."""
    due: float = 0.0
    """backoff: when it starts again; starting: when waiting for readiness ends; running: its next probe."""
    check: Future | None = None
    """The readiness check or liveness probe running in a thread, read on a later tick."""
    probe_failures: int = 0
    last_probe_error: str | None = None
    last_reason: str | None = None
    last_restart_at: float | None = None
    """Wall-clock time of the last restart."""

    def report(self) -> dict:
        return {
            "phase": self.phase,
            "restarts": self.restarts.total,
            "last_restart_reason": self.last_reason,
            "last_restart_at": self.last_restart_at,
            "probe_failures": self.probe_failures,
            "last_probe_error": self.last_probe_error,
        }


@dataclass
class Supervisor:
    launcher: Launcher
    settings: SupervisorSettings = field(default_factory=SupervisorSettings)
    detach: bool = True
    """Restarted processes write to their log files (else to this terminal), as at the first start."""
    ready_timeout: float = 180.0
    """A restarted process not ready within this is restarted again."""

    def __post_init__(self) -> None:
        now = time.monotonic()
        self.watched = [
            Watched(spec, proc, RestartHistory(self.settings), due=now + self.settings.probe_period)
            for spec, proc in self.launcher.procs
        ]
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(self.watched)), thread_name_prefix="probe")
        for watched in self.watched:
            self._record(watched)

    def run(self) -> int:
        """Watch until SIGTERM or SIGINT (`serving down`, Ctrl-C), then stop every process, last first."""
        stop: dict[str, int | None] = {"signal": None}
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.update(signal=signum))
        signal.signal(signal.SIGINT, lambda signum, frame: stop.update(signal=signum))
        log.info("supervising %s", ", ".join(w.spec.name for w in self.watched))
        try:
            while stop["signal"] is None:
                self.tick()
                time.sleep(self.settings.tick)
            return 0
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop every process, last first (the ones in backoff or given up on are stopped already)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        started = time.monotonic()
        log.info("stopping %s", ", ".join(w.spec.name for w in reversed(self.watched)))
        stopped = {w.spec.name for w in self.watched if w.phase in ("backoff", "failed")}  # groups gone already
        self.launcher.procs = [(spec, proc) for spec, proc in self.launcher.procs if spec.name not in stopped]
        self.launcher.stop_all()
        for watched in self.watched:
            if watched.spec.name in stopped and watched.spec.cleanup:
                watched.spec.cleanup()
        log.info("stopped in %.1fs", time.monotonic() - started)

    def tick(self) -> None:
        """One look at every process: start the ones whose backoff is over, restart the dead, run the checks."""
        now = time.monotonic()
        for watched in self.watched:
            if watched.phase == "failed":
                continue
            if watched.phase == "backoff":
                if now >= watched.due:
                    self._start(watched, now)
                continue
            code = watched.proc.poll()
            if code is not None:
                self._restart(watched, exit_reason(code), now)
            else:
                self._check(watched, now)

    def _check(self, watched: Watched, now: float) -> None:
        """Starting: poll readiness until `ready_timeout`; running: the liveness probe every `probe_period`. Each runs
        in a thread with its deadline and its result is read on a later tick, so a hung server stalls no other; the
        tick that reads a result starts the next check when one is due (a replica agent ticks seldom while its
        Triton hangs its own calls)."""
        if watched.check is not None:
            if not watched.check.done():
                return
            error, watched.check = watched.check.exception(), None
            if watched.phase == "starting":
                self._readiness(watched, error, now)
            else:
                self._probed(watched, error, now)
            if watched.phase not in ("starting", "running"):
                return  # being restarted
        spec = watched.spec
        if watched.phase == "starting":
            if now > watched.due:
                self._restart(watched, f"not ready after {self.ready_timeout:g}s", now)
            elif spec.ready_url is not None:  # always, while starting
                watched.check = self.pool.submit(http_ready, spec.ready_url, min(2.0, self.settings.probe_timeout))
        elif spec.liveness is not None and now >= watched.due:
            watched.due = now + self.settings.probe_period
            watched.check = self.pool.submit(spec.liveness, self.settings.probe_timeout)

    def _readiness(self, watched: Watched, error: BaseException | None, now: float) -> None:
        if error is None:
            watched.phase, watched.due = "running", now + self.settings.probe_period
            log.info("%s is ready again (pid %d)", watched.spec.name, watched.proc.pid)
            self._record(watched)

    def _probed(self, watched: Watched, error: BaseException | None, now: float) -> None:
        if error is None:
            if watched.probe_failures:
                log.info("%s answers its liveness probe again", watched.spec.name)
                watched.probe_failures, watched.last_probe_error = 0, None
                self._record(watched)
            return
        watched.probe_failures += 1
        watched.last_probe_error = str(error) or type(error).__name__
        log.warning(
            "%s failed its liveness probe (%d of %d in a row): %s",
            watched.spec.name,
            watched.probe_failures,
            self.settings.probe_failures,
            watched.last_probe_error,
        )
        if watched.probe_failures >= self.settings.probe_failures:
            reason = f"wedged: {watched.probe_failures} liveness probes failed (last: {watched.last_probe_error})"
            self._restart(watched, reason, now)
        else:
            self._record(watched)

    def _restart(self, watched: Watched, reason: str, now: float) -> None:
        """Stop what is left of the process's group, then start it again after its backoff, or give up."""
        name = watched.spec.name
        was_ready = watched.phase == "running"
        if watched.phase != "backoff":  # in backoff its group was stopped already: its pid may be another's now
            stop_group(watched.proc.pid, self.settings.stop_grace)
        watched.check, watched.probe_failures = None, 0
        watched.last_reason, watched.last_restart_at = reason, time.time()
        delay = watched.restarts.record(now, was_ready)
        if delay is None:
            watched.phase = "failed"
            log.error(
                "%s %s; not restarted: %d restarts in the last %.0fs (SUPERVISE_MAX_RESTARTS)",
                name,
                reason,
                self.settings.max_restarts,
                self.settings.restart_window,
            )
        else:
            watched.phase, watched.due = "backoff", now + delay
            log.warning("%s %s; restarting it in %.1fs (restart %d)", name, reason, delay, watched.restarts.total)
        self._record(watched)

    def _start(self, watched: Watched, now: float) -> None:
        try:
            watched.proc = self.launcher.start(watched.spec, detach=self.detach)
        except (ServingError, OSError) as exc:
            self._restart(watched, f"could not start: {exc}", now)
            return
        watched.phase = "starting" if watched.spec.ready_url else "running"
        watched.due = now + (self.ready_timeout if watched.spec.ready_url else self.settings.probe_period)
        log.info("%s started again (pid %d)", watched.spec.name, watched.proc.pid)
        self._record(watched)

    def _record(self, watched: Watched) -> None:
        update_record(self.launcher.run_dir, watched.spec.name, watched.report())
