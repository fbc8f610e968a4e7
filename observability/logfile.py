"""A process's output into a log file that rotates by size: what the launcher puts between every process it starts in
the background and `run/logs/<name>.log`.

    python -m observability.logfile run/logs/api.log --max-bytes 10485760 --backups 4 -- gunicorn ...

As with `services.triton.logpipe`, the process the launcher started becomes the command (exec) once it has forked the
writer, so the recorded pid is the server's. The writer runs this module again, without the command, so that its own
command line names only its file; forked twice, it is no child of the command, only in its process group. It reads the
command's stdout and stderr (and those of its children: workers, stubs) from one pipe, line by line, and writes them
through the standard library's `RotatingFileHandler`: at `max_bytes` the file becomes `.1`, `.1` becomes `.2`, and so
on, the oldest past `backups` deleted, so one process's logs never take more than (backups + 1) x max_bytes. A line
longer than `MAX_LINE` bytes is cut. The files are the owner's alone (0600). The writer ignores SIGTERM (it reaches the
whole process group) and ends when the last holder of the pipe has closed it, so the last lines are kept.

A line that cannot be written (the disk is full) is dropped, and the writer keeps reading: the process never blocks
on its output, nor sees an error. The writer counts what it drops, and once a line can be written again, it says
once, in the file, how many lines were dropped, from when to when and why (`No space left on device`).

Kept to the standard library: the writer lives as long as its process, and imports nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
from logging.handlers import RotatingFileHandler
from typing import BinaryIO

MAX_LINE = 64 << 10
"""The longest line kept, in bytes; the rest of a longer one is dropped (and said at its end)."""
FILE_MODE = 0o600


def stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}Z"


class LogFile(RotatingFileHandler):
    """`RotatingFileHandler` whose files are private (0600), and that drops what it cannot write, counted and said in
    one line as soon as a line fits again, instead of printing a traceback per record."""

    def __init__(self, path: str | os.PathLike, max_bytes: int, backups: int):
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", delay=True)
        self.setFormatter(logging.Formatter("%(message)s"))
        self.failure: tuple[float, str] | None = None
        """Since when, and why, lines are dropped; None while they are written."""
        self.dropped = 0

    def _open(self):
        stream = super()._open()
        os.fchmod(stream.fileno(), FILE_MODE)  # a file left readable by an older run is narrowed too
        return stream

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is not None:
            if self._write(self._dropped_line()) is not None:
                self.dropped += 1
                return
            self.failure, self.dropped = None, 0
        error = self._write(record)
        if error is not None:
            self._drop(error)

    def _write(self, record: logging.LogRecord) -> OSError | None:
        try:
            if self.shouldRollover(record):
                self.doRollover()
            if self.stream is None:
                self.stream = self._open()
            self.stream.write(self.format(record) + self.terminator)
            self.stream.flush()
        except OSError as error:
            self._discard_stream()
            return error
        return None

    def _discard_stream(self) -> None:
        """Close the file after a failed write (its buffer is lost); the next line opens it again."""
        if self.stream is not None:
            with contextlib.suppress(OSError):
                self.stream.close()
            self.stream = None

    def _drop(self, error: OSError) -> None:
        if self.failure is None:
            self.failure = (time.time(), error.strerror or str(error))
        self.dropped += 1

    def _dropped_line(self) -> logging.LogRecord:
        since, reason = self.failure or (time.time(), "")
        message = (
            f"{self.dropped} lines of this log were dropped from {stamp(since)} to {stamp(time.time())}: "
            f"{reason} ({self.baseFilename})"
        )
        if self._ends_mid_line():  # the failed write left part of its line: the notice starts a line of its own
            message = "\n" + message
        return logging.LogRecord("logfile", logging.WARNING, "", 0, message, None, None)

    def _ends_mid_line(self) -> bool:
        try:
            with open(self.baseFilename, "rb") as written:
                written.seek(-1, os.SEEK_END)
                return written.read(1) != b"\n"
        except OSError:  # no file, or an empty one
            return False


def copy_lines(source: BinaryIO, handler: LogFile) -> None:
    """Every line read from the binary stream `source` into `handler` until its end; a line over `MAX_LINE` bytes
    is cut there."""
    while chunk := source.readline(MAX_LINE):
        line = chunk.decode("utf-8", errors="replace").rstrip("\r\n")
        if not chunk.endswith(b"\n"):
            rest = 0
            while more := source.readline(MAX_LINE):
                rest += len(more.rstrip(b"\r\n"))
                if more.endswith(b"\n"):
                    break
            if rest:
                line += f" ... (line cut at {MAX_LINE} bytes, {rest} more dropped)"
        handler.handle(logging.LogRecord("logfile", logging.INFO, "", 0, line, None, None))


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The options, and the command after `--` (none: this process is the writer, reading its stdin)."""
    parser = argparse.ArgumentParser(
        prog="python -m observability.logfile", usage="%(prog)s PATH --max-bytes N --backups N [-- COMMAND [ARGS...]]"
    )
    parser.add_argument("path", help="the log file")
    parser.add_argument("--max-bytes", type=int, required=True, help="rotate when the file would pass this size")
    parser.add_argument("--backups", type=int, required=True, help="rotated files kept (PATH.1 ... PATH.N)")
    split = argv.index("--") if "--" in argv else len(argv)
    options = parser.parse_args(argv[:split])
    if options.max_bytes < 1 or options.backups < 1:
        parser.error("--max-bytes and --backups must be at least 1")
    command = argv[split + 1 :]
    if split < len(argv) and not command:
        parser.error("no command after --")
    return options, command


def write(options: argparse.Namespace) -> int:
    """The writer: its stdin into the log file until every holder of the pipe has closed it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    handler = LogFile(options.path, options.max_bytes, options.backups)
    try:
        copy_lines(sys.stdin.buffer, handler)
    finally:
        handler.close()
    return 0


def _become_writer(options: list[str], source: int, sink: int) -> None:
    """This module again, without the command, reading the pipe; SIGTERM ignored from the first instant on (an
    ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.dup2(source, 0)
    os.close(source)
    os.close(sink)
    os.execv(sys.executable, [sys.executable, "-m", "observability.logfile", *options])


def main(argv: list[str] | None = None) -> int:
    """Start the writer (this module again, without a command: its command line names only its file), then become
    the command with its stdout and stderr piped into it."""
    argv = sys.argv[1:] if argv is None else argv
    options, command = parse(argv)
    if not command:
        return write(options)
    source, sink = os.pipe()
    middle = os.fork()
    if middle == 0:  # it forks the writer and leaves: the writer is then no child of the command, whose children
        try:  # are its own (gunicorn's arbiter reaps and counts them), but it stays in the command's process group
            if os.fork() == 0:
                _become_writer(argv[: argv.index("--")], source, sink)
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    os.close(source)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print(f"cannot start {command[0]}: {error}", file=sys.stderr, flush=True)
    return 127


if __name__ == "__main__":
    sys.exit(main())
