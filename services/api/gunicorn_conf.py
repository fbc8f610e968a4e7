"""gunicorn wiring for the HTTP stacks (uvicorn workers). Bind address and worker count come from the launcher on
the command line (`services.stacks.http_service`); this file holds the worker class, the timeouts and the hook that
keeps multiprocess metrics right when a worker dies."""

from __future__ import annotations

from observability.metrics import mark_worker_dead

worker_class = "uvicorn_worker.UvicornWorker"
timeout = 120  # a worker that stops answering gunicorn's heartbeat this long is killed and replaced
graceful_timeout = 30  # on SIGTERM, workers finish in-flight requests for up to this long (`make down` drains)
keepalive = 75
backlog = 2048
accesslog = None
errorlog = "-"


def child_exit(server, worker) -> None:
    mark_worker_dead(worker.pid)
