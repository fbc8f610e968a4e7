"""A worker's token budget: its requests admitted by what they cost, not only by how many there are.

The in-flight bound (`max_inflight`, `services.api.admission`) counts requests, and one request may cost a thousand
times another: 64 texts of 10k characters, each truncated to the model's maximum length, are 64 x 256 tokens of the
real model against ~16 for a short sentence (docs/decisions/request-bounds.md). So, as TEI bounds its batches by
tokens (`--max-batch-tokens`), each worker holds at most `capacity` tokens of work
(`max_concurrent_tokens`), counted as the model runs them: texts x the longest text's tokens, padding included.

A request reserves an upper bound before it is tokenized (a text's tokens are at most its characters + 2, and at
most the model's maximum length: `estimate`), so a request refused never costs its tokenization; once tokenized, it
settles to its exact count. It is admitted when it leaves at least as many tokens free as it takes (so at most half
of what is free), or when nothing else holds any: the bigger a request, the sooner it waits as the worker fills, so
the small ones keep coming through while big ones queue, and any request up to the whole budget runs when alone.
Waiters are granted in arrival order, each one the rule admits: a small request never waits behind a big one that
does not fit yet. One that waits longer than `wait` seconds gets 429 with Retry-After (504 if its own deadline came
first); one that needs more than the whole budget gets 413 at once. A waiter whose client leaves is cancelled and
drops out of the queue (`services.api.lifetime`).
"""

from __future__ import annotations

import asyncio
from collections import deque

from services.common.deadline import time_left
from services.common.errors import DeadlineExceeded, Overloaded, PayloadTooLarge

SETTING = "SERVING_MAX_CONCURRENT_TOKENS"


def estimate(texts: list[str], max_length: int) -> int:
    """An upper bound of the padded tokens of `texts` before tokenizing them: every text as long as the longest,
    whose tokens are at most its characters plus the two special ones, and at most `max_length`."""
    return len(texts) * min(max_length, max(map(len, texts), default=0) + 2)


class Lease:
    """The tokens one request holds; released once, whatever happens to the request."""

    __slots__ = ("budget", "tokens")

    def __init__(self, budget: TokenBudget, tokens: int):
        self.budget = budget
        self.tokens = tokens

    def settle(self, tokens: int) -> None:
        """The exact count, known once tokenized: what the estimate held beyond it goes back to the budget."""
        if tokens < self.tokens:
            self.budget._give_back(self.tokens - tokens)
        else:  # the estimate is an upper bound for the tokenizers served here; count the truth anyway
            self.budget.used += tokens - self.tokens
        self.tokens = tokens

    def release(self) -> None:
        if self.tokens:
            self.budget._give_back(self.tokens)
            self.tokens = 0


class TokenBudget:
    def __init__(self, capacity: int, wait: float, retry_after: float = 1.0):
        self.capacity = capacity
        self.wait = wait
        self.retry_after = retry_after
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()

    def _admits(self, tokens: int) -> bool:
        return self.used == 0 or self.used + 2 * tokens <= self.capacity

    def take(self, tokens: int) -> Lease | None:
        """Hold `tokens` of the budget if the rule admits them now (whoever waits: the waiters are the ones it does
        not admit now); None: `queue` for them. 413 over the whole budget."""
        if tokens > self.capacity:
            raise PayloadTooLarge(
                f"this request is {tokens} tokens (texts x the longest text's tokens), over the {self.capacity} one "
                f"worker works on at once ({SETTING}): send fewer or shorter texts per request"
            )
        if self._admits(tokens):
            self.used += tokens
            return Lease(self, tokens)
        return None

    async def queue(self, tokens: int) -> Lease:
        """Wait in line for `tokens` (after `take` said no): 429 after `wait` seconds, 504 at the deadline."""
        granted = asyncio.get_running_loop().create_future()
        self._waiters.append((tokens, granted))
        limit = time_left(self.wait)
        try:
            async with asyncio.timeout(limit):
                await granted
        except BaseException as exc:  # timed out, or cancelled (client gone, deadline)
            if granted.done() and not granted.cancelled():
                self._give_back(tokens)  # granted in the same instant: give it back
            else:
                granted.cancel()
                self._forget(granted)
            if not isinstance(exc, TimeoutError):
                raise
            if limit < self.wait:
                raise DeadlineExceeded("the request's deadline passed while it waited for the token budget") from None
            raise Overloaded(
                f"this worker's token budget ({self.capacity} tokens, {SETTING}) stayed taken by other requests for "
                f"{self.wait:g} s; retry after {self.retry_after:g} s, or send fewer or shorter texts",
                retry_after=self.retry_after,
            ) from None
        return Lease(self, tokens)

    def _forget(self, granted: asyncio.Future) -> None:
        for waiter in self._waiters:
            if waiter[1] is granted:
                self._waiters.remove(waiter)
                return

    def _give_back(self, tokens: int) -> None:
        self.used -= tokens
        if self._waiters:
            self._grant()

    def _grant(self) -> None:
        """Every waiter the rule admits now, in arrival order."""
        waiting: deque[tuple[int, asyncio.Future]] = deque()
        for tokens, granted in self._waiters:
            if granted.done():
                continue
            if self._admits(tokens):
                self.used += tokens
                granted.set_result(None)
            else:
                waiting.append((tokens, granted))
        self._waiters = waiting
