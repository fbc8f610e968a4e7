"""gunicorn wiring for the HTTP stacks (uvicorn workers). Bind address, worker count and timeouts come from the
launcher's typed settings on the command line; this file holds what needs gunicorn's hooks."""

from __future__ import annotations

from observability.metrics import mark_worker_dead

worker_class = "uvicorn_worker.UvicornWorker"
timeout = 120  # a worker that stops answering gunicorn's heartbeat this long is killed and replaced
keepalive = 75
backlog = 2048
accesslog = None
errorlog = "-"


def child_exit(server, worker) -> None:
    mark_worker_dead(worker.pid)
