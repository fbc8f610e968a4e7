"""How the supervisor watches a stack (`SUPERVISE_*`), read once by `serving up` (or its detached supervisor), and
how the logs of the processes it started rotate (`SERVING_LOG_*`).

The supervisor's defaults favour not restarting a busy server by mistake: a Triton saturated by a load test still
answers a 2-token inference within seconds, so only several failed probes in a row, each with a generous deadline,
count as wedged (about half a minute with the defaults). Tests set them small."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SupervisorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SUPERVISE_", extra="ignore", use_attribute_docstrings=True)

    tick: float = Field(0.5, gt=0)
    """Seconds between two looks at every process (an exit is seen within this)."""
    backoff_initial: float = Field(1.0, ge=0)
    """Wait before the first restart; it doubles with each restart in `restart_window`."""
    backoff_max: float = Field(30.0, ge=0)
    """Longest wait before a restart."""
    max_restarts: int = Field(5, ge=0)
    """Restarts allowed in `restart_window`; past it the process is left down, `failed` in `serving status`, and
    said at ERROR in the log (a crash loop is a bug to read, not to hide)."""
    restart_window: float = Field(300.0, gt=0)
    probe_period: float = Field(5.0, gt=0)
    """Seconds between two liveness probes of a process that has one (Triton's: a small inference)."""
    probe_timeout: float = Field(10.0, gt=0)
    """Deadline of one probe: past it the probe failed."""
    probe_failures: int = Field(3, ge=1)
    """Failed probes in a row that make a process wedged: it is killed and restarted."""
    stop_grace: float = Field(5.0, ge=0)
    """Seconds from SIGTERM to SIGKILL for what is left of a dead or wedged process's group before its restart
    (a wedged server does not drain; its workers or stubs may still hold its ports)."""


class LogFileSettings(BaseSettings):
    """How the log file of each process a stack runs in the background (`run/logs/<name>.log`) rotates
    (`SERVING_LOG_*`): by size, with a bounded number of older files, so one process's logs never take more than
    (backups + 1) x max_bytes of the run directory's disk (`observability.logfile`)."""

    model_config = SettingsConfigDict(env_prefix="SERVING_LOG_", extra="ignore", use_attribute_docstrings=True)

    max_bytes: int = Field(10 << 20, ge=4096)
    """Size in bytes at which a log file is rotated (`name.log` becomes `name.log.1`)."""
    backups: int = Field(4, ge=1, le=100)
    """Rotated files kept per process (`name.log.1` ... `name.log.N`); the oldest beyond is deleted."""
