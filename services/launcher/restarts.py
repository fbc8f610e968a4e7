"""When a dead or wedged process starts again: exponential backoff over the restarts of a sliding window, and a cap
on them (a pure policy, tested without processes)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from services.launcher.settings import SupervisorSettings


@dataclass
class RestartHistory:
    """The restarts of one process: their times in the window (monotonic), and how many in all."""

    settings: SupervisorSettings
    times: list[float] = field(default_factory=list)
    total: int = 0
    unready: int = 0
    """Restarts in a row of a process that never became ready in between: however slowly they come (a readiness
    timeout is longer than the window allows for), past `max_restarts` of them it is given up too."""

    def record(self, now: float, was_ready: bool = True) -> float | None:
        """Count a restart at `now`; the wait before it (`backoff_initial`, doubling with each earlier restart still
        in the window, at most `backoff_max`), or None when the window already holds `max_restarts`, or when
        `max_restarts` restarts in a row never got the process ready: give up."""
        settings = self.settings
        self.unready = 0 if was_ready else self.unready + 1
        self.times = [t for t in self.times if now - t < settings.restart_window]
        if len(self.times) >= settings.max_restarts or self.unready > settings.max_restarts:
            return None
        self.times.append(now)
        self.total += 1
        return min(settings.backoff_max, settings.backoff_initial * 2 ** (len(self.times) - 1))


def exit_reason(returncode: int) -> str:
    """`killed by SIGKILL` or `exited with code 1`, from a Popen return code."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"
