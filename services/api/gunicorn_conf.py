"""gunicorn wiring for the HTTP stacks (uvicorn workers). Bind address and worker count come from the launcher on
the command line (`services.stacks.http_service`); this file holds the worker class, the timeouts, the log format
of gunicorn's own lines and the hook that keeps multiprocess metrics right when a worker dies."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING

from gunicorn.arbiter import Arbiter
from uvicorn_worker import UvicornWorker

from observability.logging import json_log_config
from observability.metrics import mark_worker_dead
from services.api.http_limits import GuardedHttpToolsProtocol
from services.common.settings import LogSettings
from services.launcher import reload as rolling  # not `reload` or `workers`: gunicorn reads such names as settings

if TYPE_CHECKING:
    from gunicorn.workers.base import Worker


class ServingWorker(UvicornWorker):
    """uvicorn's fastest loop and parser by name (not "auto": a missing one fails the start instead of falling back
    silently), the parser's protocol with a header size limit and a read deadline (`services.api.http_limits`), and
    uvicorn's access log only when gunicorn's is asked for (`--access-logfile`): a log line per request took ~6% of a
    gateway worker at saturation. Without the access log, uvicorn's proxy-headers layer is left out too: the
    client's address it rewrites from `X-Forwarded-For` is read by nothing else (docs/decisions/request-path.md)."""

    CONFIG_KWARGS = {"loop": "uvloop", "http": GuardedHttpToolsProtocol}
    LATE_BOOT_PAUSE = 5.0
    """Seconds a worker started after the server's first ones waits before it exits, when it failed to boot."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.cfg.accesslog is None:  # uvicorn writes its access log when its logger has any handler
            access = logging.getLogger("uvicorn.access")
            access.handlers = []
            access.propagate = False
            self.config.proxy_headers = False  # read when the server loads the app, after this

    def init_process(self) -> None:
        """gunicorn's start of a worker, except where a worker started after the server's first ones (by `serving
        reload`, or in place of one that died) fails to boot (its app does not import, or its startup fails) while
        another worker serves: gunicorn would stop the master and every worker serving beside it. This worker says
        so, waits `LATE_BOOT_PAUSE` seconds and exits with status 1: the others keep serving, and gunicorn starts
        another in its place. A server's first workers, or a worker with none serving beside it (every old one gone,
        as after gunicorn's own SIGHUP), still stop it: a server that cannot serve fails at once and refuses
        connections rather than holding them."""
        late = self.age > self.cfg.workers
        try:
            super().init_process()
        except SystemExit as exc:
            boot_error = exc.code in (Arbiter.WORKER_BOOT_ERROR, Arbiter.APP_LOAD_ERROR)
            if not late or not boot_error or not self._others_serving():
                raise
            self._late_boot_failed(f"its startup failed (status {exc.code})")
        except Exception as exc:
            if not late or self.booted or not self._others_serving():
                raise
            self.log.exception("worker %s failed to boot", self.pid)
            self._late_boot_failed(f"{type(exc).__name__}: {exc}")

    def _others_serving(self) -> bool:
        """Whether another worker of this master is in its accept loop: its event loop polls one of the master's
        listening sockets, as the kernel shows it (`services.launcher.reload`)."""
        listeners = {os.fstat(sock.fileno()).st_ino for sock in self.sockets}
        return any(listeners & rolling.polled(pid) for pid in rolling.workers(self.ppid) if pid != self.pid)

    def _late_boot_failed(self, why: str) -> None:
        self.log.error(
            "worker %s failed to boot: %s; the server's other workers keep serving, and another is started in its "
            "place in %.0f s",
            self.pid,
            why,
            self.LATE_BOOT_PAUSE,
        )
        time.sleep(self.LATE_BOOT_PAUSE)
        sys.exit(1)


worker_class = "services.api.gunicorn_conf.ServingWorker"
timeout = 120  # a worker that stops answering gunicorn's heartbeat this long is killed and replaced
graceful_timeout = 30  # on SIGTERM, workers finish in-flight requests for up to this long (`make down` drains)
keepalive = 75
backlog = 2048
accesslog = None
errorlog = "-"
control_socket_disable = True  # one fixed socket path per user would clash between two stacks (tests run several)

# With JSON logs asked for (the app's own setting, read the same way), gunicorn's and uvicorn's own lines (worker
# boots, exits, signals) are JSON as well, so every line of the file parses.
if LogSettings().observability.log_json:
    logconfig_dict = json_log_config()


def child_exit(server: Arbiter, worker: Worker) -> None:
    mark_worker_dead(worker.pid)
