"""Structured logging: plain or JSON lines, each with the request id and trace id of the request being served.
Once a model version is chosen for the request (`set_serving_model`), JSON lines also carry the endpoint, that
version and the registry run that made it ("-" for a version not deployed from the registry), so an alert leads to
the run. A line's message is cut at `MESSAGE_CHARS`, each line of its traceback at `TRACEBACK_LINE_CHARS`: an
exception raised on what a client sent may carry it whole."""

from __future__ import annotations

import contextvars
import logging
import os
import sys
import time
from types import TracebackType
from typing import Any, TypeAlias

import orjson

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
trace_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("trace_id", default="-")
# (endpoint, version, run id) of the model version serving the current request
model_var: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar("model", default=None)

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
MESSAGE_CHARS = 8000
"""The longest message a line carries; the sites that log what a client sent cut it much shorter already."""
TRACEBACK_LINE_CHARS = 1000
"""The longest line of a traceback a log line carries: an exception's message may hold what a client sent."""
_ExcInfo: TypeAlias = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
"""What `sys.exc_info()` returns, as `logging.Formatter.formatException` takes it."""


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def cut_traceback(text: str) -> str:
    """A formatted traceback with each of its lines cut at `TRACEBACK_LINE_CHARS`."""
    return "\n".join(cut(line, TRACEBACK_LINE_CHARS) for line in text.split("\n"))


class ContextFilter(logging.Filter):
    """Adds the current request's ids (and model version) to a line; a line that names its own request id (a summary
    of many requests names "-": `observability.repeats`) is left as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if hasattr(record, "request_id"):
            return True
        record.request_id = request_id_var.get()
        record.trace_id = trace_id_var.get()
        model = model_var.get()
        if model is not None:
            record.endpoint, record.version, record.run_id = model
        return True


class PlainFormatter(logging.Formatter):
    """`PLAIN_FORMAT` lines, tracebacks cut as the JSON lines' are."""

    def formatException(self, ei: _ExcInfo) -> str:  # noqa: N802 - logging's name
        return cut_traceback(super().formatException(ei))


class JsonFormatter(logging.Formatter):
    def __init__(self, *args: Any, service: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The launcher names each process it starts (LOG_SERVICE), so merged logs say which process wrote a line.
        self.service = service or os.environ.get("LOG_SERVICE", "-")
        self._second: tuple[int, str] = (-1, "")
        """The last line's whole second and its text: lines of one second share it (one tuple: thread-safe)."""

    def timestamp(self, record: logging.LogRecord) -> str:
        """The line's time in UTC, ISO 8601 to the millisecond."""
        second = int(record.created)
        known, text = self._second
        if known != second:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, text)
        return f"{text}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.timestamp(record),
            "service": self.service,
            "level": record.levelname,
            "logger": record.name,
            "msg": cut(record.getMessage(), MESSAGE_CHARS),
            "request_id": getattr(record, "request_id", "-"),
            "trace_id": getattr(record, "trace_id", "-"),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD and k not in entry})
        if record.exc_info:
            entry["exc"] = cut_traceback(self.formatException(record.exc_info))
        return orjson.dumps(entry, default=str).decode()


PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d] req=%(request_id)s trace=%(trace_id)s %(message)s"


def set_serving_model(endpoint: str, version: str, run_id: str | None) -> contextvars.Token:
    """Name the model version serving this request on every log line until the request ends."""
    return model_var.set((endpoint, version, run_id or "-"))


def lean_records() -> None:
    """Log records leave out what no line of this project shows: the caller's file, line and function (a walk up the
    stack on every line), the thread's name and the multiprocessing process's name (the logging HOWTO's
    "Optimization" section). The process id stays: plain lines show it."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False


def setup_logging(level: str = "INFO", json_lines: bool = False) -> None:
    lean_records()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if json_lines else PlainFormatter(PLAIN_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def json_log_config() -> dict:
    """A logging.config dict sending gunicorn's and uvicorn's loggers through the JSON formatter."""
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "json",
        "filters": ["context"],
        "stream": "ext://sys.stderr",
    }
    loggers = ("gunicorn.error", "gunicorn.access", "uvicorn", "uvicorn.error", "uvicorn.access")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": ContextFilter}},
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"json": handler},
        "root": {"level": "INFO", "handlers": ["json"]},
        "loggers": {name: {"level": "INFO", "handlers": ["json"], "propagate": False} for name in loggers},
    }
