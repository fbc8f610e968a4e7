"""The token budget admits work by its cost: small requests keep coming through while big ones wait their turn; a
wait ends in 429 (or 504 at the request's deadline); a request over the whole budget is 413; tokens never leak,
whatever happens to a request."""

import asyncio
import time

import pytest

from services.api.budget import TokenBudget, estimate
from services.common.deadline import deadline_var
from services.common.errors import DeadlineExceeded, Overloaded, PayloadTooLarge


async def take(budget: TokenBudget, tokens: int):
    return budget.take(tokens) or await budget.queue(tokens)


def test_the_estimate_bounds_the_padded_tokens_by_characters_and_the_models_length():
    assert estimate(["hi", "hello"], 256) == 2 * 7, "every text as long as the longest: 5 characters + 2"
    assert estimate(["x" * 10_000] * 64, 256) == 64 * 256


def test_small_requests_pass_a_big_one_that_waits_and_the_big_one_runs_once_the_worker_is_free():
    async def scenario():
        budget = TokenBudget(1000, wait=5)
        first = await take(budget, 400)  # alone: admitted
        big = asyncio.ensure_future(take(budget, 400))  # 400 + 2 x 400 > 1000: waits
        await asyncio.sleep(0)
        small = await asyncio.wait_for(take(budget, 50), 0.1)  # 400 + 2 x 50 <= 1000: through at once
        assert not big.done() and budget.used == 450
        first.release()
        small.release()
        lease = await asyncio.wait_for(big, 0.1)
        assert budget.used == 400
        lease.release()
        assert budget.used == 0

    asyncio.run(scenario())


def test_any_request_up_to_the_whole_budget_runs_alone_and_over_it_is_413_naming_the_setting():
    async def scenario():
        budget = TokenBudget(1000, wait=5)
        (await take(budget, 1000)).release()
        with pytest.raises(PayloadTooLarge, match="over the 1000 .*MAX_CONCURRENT_TOKENS"):
            await take(budget, 1001)

    asyncio.run(scenario())


def test_waiters_are_granted_in_arrival_order():
    async def scenario():
        budget = TokenBudget(1000, wait=5)
        holder = await take(budget, 600)
        order = []

        async def wait(name):
            lease = await take(budget, 400)
            order.append(name)
            return lease

        waiters = [asyncio.ensure_future(wait(name)) for name in ("a", "b", "c")]
        await asyncio.sleep(0.01)
        holder.release()  # a runs alone; b would leave less free than it takes (400 + 2 x 400 > 1000)
        await asyncio.sleep(0.01)
        assert order == ["a"]
        (await waiters[0]).release()
        await asyncio.sleep(0.01)
        assert order == ["a", "b"]
        for waiter in waiters[1:]:
            (await waiter).release()
        assert order == ["a", "b", "c"] and budget.used == 0

    asyncio.run(scenario())


def test_a_wait_past_the_limit_is_429_with_retry_after_and_leaves_the_queue():
    async def scenario():
        budget = TokenBudget(1000, wait=0.05, retry_after=2)
        holder = await take(budget, 900)
        start = time.monotonic()
        with pytest.raises(Overloaded, match="token budget") as refused:
            await take(budget, 300)
        assert 0.04 < time.monotonic() - start < 1
        assert refused.value.retry_after == 2 and refused.value.status_code == 429
        assert not budget._waiters and budget.used == 900
        holder.release()
        assert budget.used == 0

    asyncio.run(scenario())


def test_a_request_whose_deadline_comes_first_is_504():
    async def scenario():
        budget = TokenBudget(1000, wait=5)
        holder = await take(budget, 900)
        deadline_var.set(time.monotonic() + 0.05)
        with pytest.raises(DeadlineExceeded):
            await take(budget, 300)
        holder.release()

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_queue_and_takes_nothing():
    async def scenario():
        budget = TokenBudget(1000, wait=5)
        holder = await take(budget, 900)
        waiter = asyncio.ensure_future(take(budget, 300))
        await asyncio.sleep(0.01)
        waiter.cancel()  # its client left
        await asyncio.gather(waiter, return_exceptions=True)
        assert not budget._waiters
        holder.release()
        assert budget.used == 0

    asyncio.run(scenario())


def test_a_waiter_granted_as_it_is_cancelled_gives_its_tokens_back():
    async def scenario():
        budget = TokenBudget(1000, wait=5)
        holder = await take(budget, 900)
        waiter = asyncio.ensure_future(take(budget, 300))
        await asyncio.sleep(0.01)
        holder.release()  # grants the waiter...
        waiter.cancel()  # ...which is cancelled before it runs again
        await asyncio.gather(waiter, return_exceptions=True)
        assert waiter.cancelled() and budget.used == 0

    asyncio.run(scenario())


def test_a_lease_settles_to_the_exact_count_and_releases_once():
    async def scenario():
        budget = TokenBudget(1000, wait=5)
        lease = await take(budget, 640)
        lease.settle(128)
        assert budget.used == 128
        lease.release()
        lease.release()
        assert budget.used == 0

    asyncio.run(scenario())
