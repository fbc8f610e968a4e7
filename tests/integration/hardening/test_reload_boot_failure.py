"""`serving reload` of new code that does not start, on a real gunicorn master with the HTTP stacks' own
configuration (`services.api.gunicorn_conf`) serving a small ASGI app from a temporary folder: gunicorn stops the
master, and every worker serving beside it, when a worker fails to boot; a worker started after the first ones, with
another serving beside it, now exits on its own instead. The reload stops and says so, no request fails, the old
workers serve on, and once the code starts again the worker gunicorn starts in place of the failed one serves too.
With no worker left serving (gunicorn's own SIGHUP stops every old one at once) the server still stops, refusing
connections rather than holding them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from services.launcher.reload import ReloadFailed, accepting, alive, roll, workers
from services.launcher.spec import free_port

APP = """
import os
from pathlib import Path

if Path(__file__).with_name("import-fails").exists():
    raise ImportError("this version does not import")


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if Path(__file__).with_name("startup-fails").exists():
                    await send({"type": "lifespan.startup.failed", "message": "this version does not start"})
                    return
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(os.getpid()).encode()})
"""


def wait_for(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.1)


def start(tmp_path: Path, port: int, log) -> subprocess.Popen:
    """gunicorn with the HTTP stacks' configuration and two workers serving `APP` on `port`, once both accept."""
    (tmp_path / "small_app.py").write_text(APP)
    command = [sys.executable, "-m", "gunicorn", "-c", "python:services.api.gunicorn_conf", "-w", "2"]
    command += ["-b", f"127.0.0.1:{port}", "--chdir", str(tmp_path), "small_app:app"]
    master = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: sum(accepting(p, [port], master.pid) for p in workers(master.pid)) == 2, 30)
    except BaseException:
        master.kill()
        raise
    return master


@pytest.mark.parametrize("failure", ["import-fails", "startup-fails"])
def test_a_reload_to_code_that_does_not_start_stops_with_the_old_workers_serving(tmp_path: Path, failure: str):
    port = free_port()
    log = (tmp_path / "gunicorn.log").open("w")
    master = start(tmp_path, port, log)
    answers: list[tuple[int, str]] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                try:
                    answer = client.get(f"http://127.0.0.1:{port}/", headers={"connection": "close"})
                    answers.append((answer.status_code, answer.text))
                except httpx.HTTPError as exc:
                    answers.append((-1, repr(exc)))
                time.sleep(0.01)

    try:
        old = workers(master.pid)
        (tmp_path / failure).touch()
        caller = threading.Thread(target=load)
        caller.start()
        with pytest.raises(ReloadFailed, match="no new worker was accepting within 8s; the old workers keep serving"):
            roll(master.pid, [port], timeout=8, say=print)
        stop.set()
        caller.join()
        served = {text for code, text in answers if code == 200}
        failed = [answer for answer in answers if answer[0] != 200]
        print(f"\n{len(answers)} requests during the reload, {len(failed)} failed; served by {sorted(served)}")
        assert alive(master.pid), "the master runs on"
        assert failed == [] and len(answers) > 50
        assert served == {str(pid) for pid in old}, "the old workers served every request"
        assert set(old) <= set(workers(master.pid))
        assert "failed to boot" in (tmp_path / "gunicorn.log").read_text()
        (tmp_path / failure).unlink()
        wait_for(lambda: sum(accepting(p, [port], master.pid) for p in workers(master.pid)) == 3, 30)
    finally:
        master.terminate()
        master.wait(timeout=60)
        log.close()


def test_gunicorns_own_reload_to_code_that_does_not_import_stops_the_server(tmp_path: Path):
    port = free_port()
    log = (tmp_path / "gunicorn.log").open("w")
    master = start(tmp_path, port, log)
    try:
        (tmp_path / "import-fails").touch()
        os.kill(master.pid, signal.SIGHUP)  # every new worker at once, every old one stopped at once
        assert master.wait(timeout=60) != 0, "no worker can serve: the master stops"
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
    finally:
        if master.poll() is None:
            master.kill()
            master.wait()
        log.close()
