"""The `custom` and `custom_async` engines: the user's `process` is the step (sync or async); with `custom_async`,
`send_request` returns an awaitable in async code."""

from __future__ import annotations

from services.gateway.engines.base import Engine

CUSTOM = Engine("custom", "the user's `process` (sync, or async)")
CUSTOM_ASYNC = Engine("custom_async", "the user's `process`; `send_request` returns an awaitable in async code")
