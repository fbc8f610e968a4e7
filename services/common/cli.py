"""How the project's command-line tools end on a user error: one line saying what is wrong and what to do, exit
code 2, no traceback (`--debug` anywhere on the command line shows it)."""

from __future__ import annotations

import sys
import traceback
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


class _Flags:
    debug = False
    """`--debug` was on the command line: every error shows its traceback."""


def debugging() -> bool:
    """Whether this command runs with `--debug` (a command it starts in the background gets it too)."""
    return _Flags.debug


def fail(error: Exception | str) -> NoReturn:
    """End a command on an error it caught: `error: <message>` on stderr, the message as it is (brackets too), exit
    code 2; with `--debug`, the error's traceback first (or, for an error made here, where `fail` was called)."""
    if _Flags.debug:
        if isinstance(error, Exception) and error.__traceback__ is not None:
            traceback.print_exception(error, file=sys.stderr)
        else:
            print("Traceback (most recent call last):", file=sys.stderr)
            traceback.print_stack(sys._getframe(1), file=sys.stderr)
    console.print(f"[bold red]error:[/] {escape(str(error))}")
    raise typer.Exit(2)


def run(app: Callable[[], object]) -> None:
    """Run a console script's app: a user error it lets through ends in one line and exit code 2, its traceback
    shown only with `--debug`."""
    debug = _Flags.debug = "--debug" in sys.argv
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
