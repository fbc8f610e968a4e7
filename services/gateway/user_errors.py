"""What an exception raised in a configured endpoint's user code (its Preprocess methods, its model) becomes: user
code failing is the caller's 422 naming the stage; the gateway's own errors and the request's own cancellation go
on as they are."""

from __future__ import annotations

import asyncio

from services.common.errors import ServingError

MESSAGE_CHARS = 500
"""Characters of a user exception's message an error body carries at most (the log has all of it)."""


def not_users(exc: BaseException) -> bool:
    """The gateway's own errors, and the request's own cancellation (its deadline, its client gone): not user code
    failing. A CancelledError user code let through (it cancelled something of its own) is the user's."""
    if isinstance(exc, ServingError):
        return True
    task = asyncio.current_task()
    return isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling() > 0


def describe(exc: BaseException) -> str:
    """The exception's type and message for an error body: at most `MESSAGE_CHARS` of the message, and never an
    exception of its own."""
    try:
        text = str(exc)
    except Exception as error:  # noqa: BLE001 - user exceptions' __str__ may fail too
        text = f"(its message cannot be shown: {type(error).__name__} in its __str__)"
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS] + f"... ({len(text)} characters)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
