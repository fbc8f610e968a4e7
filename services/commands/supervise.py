"""Starting a stack and keeping it up: the processes one after the other, then the supervisor
(`services.launcher.Supervisor`) restarting whatever dies or wedges until `serving down` or Ctrl-C.

In the foreground `serving up` is the supervisor. Detached, `serving up --detach` starts `serving supervise` in the
background (recorded as `supervisor`, so `serving down` stops it first and `serving status` shows it) and relays its
progress until the stack is ready: that process starts the stack as its own children and supervises them, so it
sees their exits and exit codes as the foreground does."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import typer

from services.common.cli import console, debugging, fail
from services.common.errors import ServingError
from services.common.private import private_dir, write_private
from services.common.settings import RunSettings

if TYPE_CHECKING:
    from services.launcher import Launcher, ProcessSpec
    from services.stacks import StackOptions

OPTIONS_FILE = "supervisor-options.json"


def plan_stack(options: StackOptions) -> list[ProcessSpec]:
    """The stack's processes, every port they bind checked free at once; a problem ends the command with the reason
    before anything starts."""
    from services.launcher import check_ports
    from services.stacks import port_claims, stack_processes, unclaimed_ports

    try:
        specs = stack_processes(options)
        check_ports(port_claims(options, specs), unclaimed_ports(options))
    except (ServingError, OSError) as error:
        fail(error)
    return specs


def start_stack(options: StackOptions, *, detach: bool, ready_timeout: float) -> Launcher:
    """Start the stack's processes one after the other, each once the one before is ready; on a failure stop what
    started and end the command with the reason."""
    from services.launcher import Launcher

    specs = plan_stack(options)
    launcher = Launcher(options.run_dir)
    try:
        for spec in specs:
            proc = launcher.start_ready(spec, detach=detach, timeout=ready_timeout)
            console.print(
                f"[green]{spec.name} ready[/] (pid {proc.pid})" + (f" at {spec.ready_url}" if spec.ready_url else "")
            )
    except (ServingError, OSError) as error:
        launcher.stop_all()
        fail(error)
    return launcher


def announce(options: StackOptions, *, detach: bool) -> None:
    """Say where the stack is up and how it stops (and that Triton's GPU errors on a CPU machine are expected)."""
    api_port = options.triton_ports.http if options.stack == "triton" else options.port
    if options.stack != "fastapi":
        console.print(
            f"note: the CUDA/NVML/DCGM errors in {options.run_dir / 'logs' / 'triton.log'} are Triton looking for a "
            "GPU; harmless on a machine without one"
        )
    default_dir = options.run_dir.resolve() == Path("run").resolve()
    stop = "`make down`" if default_dir else f"`SERVING_RUN_DIR={options.run_dir} .venv/bin/serving down`"
    console.print(
        f"STACK={options.stack} is up on port {api_port}"
        + (f"; {stop} stops it" if detach else "; Ctrl-C stops it")
        + " (restarted when a process dies or wedges: `serving status`)"
    )


def run_supervisor(launcher: Launcher, options: StackOptions, *, detach: bool, ready_timeout: float) -> int:
    """Supervise what `launcher` started until stopped; then stop it all. In the foreground this process records
    itself as the supervisor (detached, `serving up --detach` recorded it)."""
    from observability.logging import setup_logging
    from services.launcher import SUPERVISOR, Supervisor, SupervisorSettings
    from services.launcher.records import remove_record, write_meta

    setup_logging("INFO", json_lines=options.log_json)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a readiness check a tick is not news
    if not detach:
        write_meta(options.run_dir, {"name": SUPERVISOR, "pid": os.getpid(), "started_at": time.time(), "log": None})
    try:
        return Supervisor(launcher, SupervisorSettings(), detach=detach, ready_timeout=ready_timeout).run()
    finally:
        remove_record(options.run_dir, SUPERVISOR)


def supervise() -> None:
    """(What `serving up --detach` runs in the background.) Start the stack saved in the run directory, then keep
    it up."""
    from services.stacks import StackOptions, write_stack_info

    saved = json.loads((RunSettings().run_dir / OPTIONS_FILE).read_text())
    options = StackOptions.from_json(json.dumps(saved["options"]))
    launcher = start_stack(options, detach=True, ready_timeout=saved["ready_timeout"])
    announce(options, detach=True)
    write_stack_info(options)  # last: `serving up --detach` waits for it
    raise typer.Exit(run_supervisor(launcher, options, detach=True, ready_timeout=saved["ready_timeout"]))


def start_detached(options: StackOptions, ready_timeout: float) -> int:
    """Start `serving supervise` in the background with these options, relay what it prints until the stack is
    ready (its description written) or it ends; returns the exit code for `serving up --detach`."""
    from services.launcher import SUPERVISOR, Launcher, ProcessSpec, recorded
    from services.launcher.groups import stop_process
    from services.launcher.records import STACK_INFO, remove_record

    run_dir = options.run_dir
    if recorded(run_dir).get(SUPERVISOR):
        fail(f"a stack is already up in {run_dir}: `make down` stops it")
    private_dir(run_dir)
    saved = {"options": json.loads(options.to_json()), "ready_timeout": ready_timeout}
    write_private(run_dir / OPTIONS_FILE, json.dumps(saved, indent=2) + "\n")  # a state URL may hold a password
    (run_dir / STACK_INFO).unlink(missing_ok=True)
    launcher = Launcher(run_dir)
    log = launcher.log_path(SUPERVISOR)
    offset = log.stat().st_size if log.is_file() else 0
    argv = [sys.executable, "-m", "services.cli", "supervise", *(["--debug"] if debugging() else [])]
    spec = ProcessSpec(name=SUPERVISOR, argv=argv, env={"SERVING_RUN_DIR": str(run_dir)})
    proc = launcher.start(spec, detach=True)
    try:
        with open(log, errors="replace") as output:
            output.seek(offset)
            relay = Relay(output)
            while proc.poll() is None and not (run_dir / STACK_INFO).is_file():
                relay.forward()
                time.sleep(0.2)
            relay.forward(final=True)
    except KeyboardInterrupt:
        stop_process(proc.pid, 120)
        remove_record(run_dir, SUPERVISOR)
        return 130
    if proc.poll() is not None:
        remove_record(run_dir, SUPERVISOR)
        return proc.returncode or 1
    return 0


class Relay:
    """The supervisor's console lines, from its log file onto this command's stderr (its JSON log lines stay in the
    file, for `serving logs`)."""

    def __init__(self, source: TextIO):
        self.source, self.partial = source, ""

    def forward(self, *, final: bool = False) -> None:
        lines = (self.partial + self.source.read()).split("\n")
        self.partial = "" if final else lines.pop()
        for line in lines:
            if line.strip() and not line.startswith("{"):
                print(line, file=sys.stderr, flush=True)
