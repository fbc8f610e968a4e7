"""`serving reload`: replace the HTTP server's workers one at a time under load (`services.launcher.reload`): new
code and configuration from the same sockets, no request refused, no request answered by a worker before its app
finished loading."""

from __future__ import annotations

import httpx
import typer

from services.common.cli import console, fail
from services.common.settings import RunSettings

SERVERS = ("gateway", "fastapi")
"""The gunicorn servers `serving up` starts, by the name it records them under (STACK=clearml, STACK=fastapi)."""


def reload(
    name: str | None = typer.Option(None, help="The server to reload: gateway or fastapi; default: the one running."),
    timeout: float = typer.Option(120.0, min=1, help="Seconds each new worker gets to load, each old one to finish."),
    pid: int = typer.Option(
        None, min=1, help="A gunicorn master not started by `serving up` (in a container: 1); needs --port."
    ),
    port: list[int] = typer.Option(
        None, help="With --pid: the port it binds, then each port its workers open themselves (the gateway's gRPC)."
    ),
) -> None:
    """Restart the HTTP server's workers one at a time (rolling): each new worker is accepting before an old one
    stops, and an old one finishes its requests before the next is replaced. Waits until every worker is new."""
    from services.launcher.reload import ReloadFailed, exclusive, roll

    if pid is not None:
        if not port:
            fail("--pid needs --port: the port the server binds (and its workers' gRPC port, if any)")
        name, master, ports, ready = name or "server", pid, list(port), None
    else:
        name, master, ports, ready = recorded_server(name)
    console.print(f"{name}: replacing its workers one at a time (master pid {master})")
    try:
        with exclusive(master):
            new = roll(master, ports, timeout=timeout, say=lambda line: console.print(f"{name}: {line}"))
    except ReloadFailed as exc:
        fail(f"{name} reload stopped: {exc}")
    if ready:
        try:
            answer = httpx.get(ready, timeout=10)
        except httpx.HTTPError as exc:
            fail(f"{name}: every worker replaced, but {ready} did not answer: {exc}")
        if answer.status_code != 200:
            fail(f"{name}: every worker replaced, but {ready} answered {answer.status_code}: {answer.text[:200]}")
    console.print(f"{name}: reloaded, {len(new)} new workers accepting (pids {', '.join(map(str, new))})")


def recorded_server(name: str | None) -> tuple[str, int, list[int], str | None]:
    """The server `serving up` recorded in the run directory: its name, master pid, ports and readiness URL."""
    from services.launcher import recorded
    from services.launcher.records import read_meta

    run_dir = RunSettings().run_dir
    alive = recorded(run_dir)
    running = [server for server in SERVERS if alive.get(server)]
    if name is None and len(running) != 1:
        fail(f"no gateway or fastapi server runs from {run_dir}: `serving status` lists what runs, `serving up` starts")
    name = name or running[0]
    meta = read_meta(run_dir, name)
    if not alive.get(name) or "pid" not in meta or not meta.get("ports"):
        fail(f"no {name} server recorded running in {run_dir}: `serving status` lists what runs")
    return name, meta["pid"], meta["ports"], meta.get("ready_url")
