"""How the project's command-line tools end on a user error: one line saying what is wrong and what to do, exit
code 2, no traceback (`--debug` anywhere on the command line shows it)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from services.common.errors import ServingError

# What a user can cause and fix: bad settings or files, missing files or binaries, values out of range.
USER_ERRORS = (ServingError, OSError, ValueError)

console = Console(stderr=True, soft_wrap=True, emoji=False)
"""On stderr, one message a line (stdout stays the command's output); no emoji codes: `a:b:FP32` stays as typed."""


def fail(error: Exception | str) -> NoReturn:
    """End a command on an error it caught: `error: <message>` on stderr, the message as it is (brackets too), exit
    code 2."""
    console.print(f"[bold red]error:[/] {escape(str(error))}")
    raise typer.Exit(2)


def run(app: Callable[[], object]) -> None:
    """Run a console script's app: a user error it lets through ends in one line and exit code 2, its traceback
    shown only with `--debug`."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        app()
    except USER_ERRORS as exc:
        if debug:
            raise
        message = exc.message if isinstance(exc, ServingError) else str(exc) or type(exc).__name__
        print(f"error: {message}", file=sys.stderr)
        print("(run again with --debug for the traceback)", file=sys.stderr)
        raise SystemExit(2) from None
