"""gunicorn wiring for the HTTP stacks (uvicorn workers). Bind address and worker count come from the launcher on
the command line (`services.stacks.http_service`); this file holds the worker class, the timeouts, the log format
of gunicorn's own lines and the hook that keeps multiprocess metrics right when a worker dies."""

from __future__ import annotations

import logging

from uvicorn_worker import UvicornWorker

from observability.logging import json_log_config
from observability.metrics import mark_worker_dead
from services.api.protocol import GuardedHttpToolsProtocol
from services.common.settings import LogSettings


class ServingWorker(UvicornWorker):
    """uvicorn's fastest loop and parser by name (not "auto": a missing one fails the start instead of falling back
    silently), the parser's protocol with a header size limit and a read deadline (`services.api.protocol`), and
    uvicorn's access log only when gunicorn's is asked for (`--access-logfile`): a log line per request took ~6% of a
    gateway worker at saturation. Without the access log, uvicorn's proxy-headers layer is left out too: the
    client's address it rewrites from `X-Forwarded-For` is read by nothing else (docs/decisions/request-path.md)."""

    CONFIG_KWARGS = {"loop": "uvloop", "http": GuardedHttpToolsProtocol}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.cfg.accesslog is None:  # uvicorn writes its access log when its logger has any handler
            access = logging.getLogger("uvicorn.access")
            access.handlers = []
            access.propagate = False
            self.config.proxy_headers = False  # read when the server loads the app, after this


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


def child_exit(server, worker) -> None:
    mark_worker_dead(worker.pid)
