"""A real HTTP server with a known fixed delay, for checking the load generator's numbers.

    python -m tests.support.delay_server PORT DELAY_SECONDS [STALL_AT_SECONDS STALL_SECONDS]

Every request is answered after DELAY (asyncio.sleep: concurrent requests overlap). With STALL_AT, the first request
arriving after that many seconds blocks the whole server for STALL seconds (a GC pause, a stuck worker).
`/reject` answers 429 at once (an overloaded server shedding load); `/vary[?delay=D]` answers after D (default DELAY) on
average (0.5 to 1.5 times it) with a JSON body whose length varies from request to request (as embeddings do).
"""

import asyncio
import sys
import time

from aiohttp import web


def main() -> None:
    port, delay = int(sys.argv[1]), float(sys.argv[2])
    stall_at = float(sys.argv[3]) if len(sys.argv) > 3 else None
    stall = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    started = time.monotonic()
    state = {"stalled": False, "traced": 0, "unsampled": 0, "varied": 0}

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        if "traceparent" in request.headers:
            state["traced" if request.headers["traceparent"].endswith("-01") else "unsampled"] += 1
        if stall_at is not None and not state["stalled"] and time.monotonic() - started >= stall_at:
            state["stalled"] = True
            time.sleep(stall)  # blocks the event loop: every request waits
        await asyncio.sleep(delay)
        return web.Response(body=b'{"ok": true}', content_type="application/json")

    async def reject(request: web.Request) -> web.Response:
        return web.Response(status=429, text="overloaded", headers={"Retry-After": "1"})

    async def vary(request: web.Request) -> web.Response:
        await request.read()
        state["varied"] += 1
        mean = float(request.query.get("delay", delay))
        await asyncio.sleep(mean * (0.5 + state["varied"] * 0.6180339887 % 1))  # evenly spread around the mean
        return web.json_response({"ok": True, "pad": "x" * (state["varied"] % 97)})

    async def reset(request: web.Request) -> web.Response:
        nonlocal started
        started = time.monotonic()
        state["stalled"] = False
        return web.Response(text="reset")

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"traced": state["traced"], "unsampled": state["unsampled"]})

    app = web.Application()
    app.router.add_post("/reset", reset)
    app.router.add_get("/stats", stats)
    app.router.add_route("*", "/reject", reject)
    app.router.add_route("*", "/vary", vary)
    app.router.add_route("*", "/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
