"""Start, watch and stop the processes of a stack (gunicorn, tritonserver, ...).

Each process runs in its own process group (`groups`), so stopping the group also stops what it spawned (gunicorn
workers, Triton's Python-backend stubs). Its pid file and metadata under the run directory (`records`) let
`serving down` and `serving status` find every process the `serving` commands started, from another shell.
`launch.Launcher` starts them and waits for each to be ready, their output into log files that rotate by size
(`LogFileSettings`, `observability.logfile`); `spec.ProcessSpec` says what to start; `ports` checks
every port of a run before its first start; `supervise.Supervisor` restarts the ones that die or wedge, with
backoff (`restarts`, `settings`).
"""

from __future__ import annotations

from services.launcher.groups import stop_group
from services.launcher.launch import Launcher
from services.launcher.ports import PortClaim, check_ports
from services.launcher.records import SUPERVISOR, process_status, recorded, stop_recorded
from services.launcher.settings import LogFileSettings, SupervisorSettings
from services.launcher.spec import ProcessSpec, free_port, local_address, port_free
from services.launcher.supervise import Supervisor

__all__ = [
    "SUPERVISOR",
    "Launcher",
    "LogFileSettings",
    "PortClaim",
    "ProcessSpec",
    "Supervisor",
    "SupervisorSettings",
    "check_ports",
    "free_port",
    "local_address",
    "port_free",
    "process_status",
    "recorded",
    "stop_group",
    "stop_recorded",
]
