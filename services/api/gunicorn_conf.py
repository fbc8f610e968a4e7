"""gunicorn wiring for the HTTP stacks (uvicorn workers). Bind address and worker count come from the launcher on
the command line (`services.stacks.http_service`); this file holds the worker class, the timeouts, the log format
of gunicorn's own lines and the hook that keeps multiprocess metrics right when a worker dies."""

from __future__ import annotations

import os

from observability.logging import json_log_config
from observability.metrics import mark_worker_dead

worker_class = "uvicorn_worker.UvicornWorker"
timeout = 120  # a worker that stops answering gunicorn's heartbeat this long is killed and replaced
graceful_timeout = 30  # on SIGTERM, workers finish in-flight requests for up to this long (`make down` drains)
keepalive = 75
backlog = 2048
accesslog = None
errorlog = "-"
control_socket_disable = True  # one fixed socket path per user would clash between two stacks (tests run several)

# With JSON logs asked for (SERVING_/GATEWAY_OBSERVABILITY__LOG_JSON=true, read by the app's settings too), gunicorn's
# and uvicorn's own lines (worker boots, exits, signals) are JSON as well, so every line of the file parses.
if any(key.endswith("OBSERVABILITY__LOG_JSON") and value.lower() in ("1", "true") for key, value in os.environ.items()):
    logconfig_dict = json_log_config()


def child_exit(server, worker) -> None:
    mark_worker_dead(worker.pid)
