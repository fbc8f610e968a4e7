"""User code that hangs or fails in odd ways (`services.gateway.user_threads`, `services.gateway.configured`): a step
that never returns keeps one thread and is reported, and past the last free thread new steps are refused at once;
an endpoint whose load() hangs is left out within the limit while the others are served; an unload() that hangs is
not waited for; SystemExit, KeyboardInterrupt and an exception whose str() fails are a 422 naming the stage."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.api.endpoint import Endpoints
from services.common.errors import InvalidInput, Unavailable
from services.gateway.configured import build_configured
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.user_threads import TookTooLong, UserThreads, call_within
from services.triton.grpc_client import TritonClient

REQUEST_ID = contextvars.ContextVar("request_id", default=None)


def test_steps_past_the_last_free_thread_are_refused_at_once_and_stuck_ones_are_reported():
    release = threading.Event()
    threads = UserThreads(2, stuck_after=0.05, retry_after=2.0)

    async def scenario():
        hung = [asyncio.ensure_future(threads.run(release.wait)) for _ in range(2)]
        await asyncio.sleep(0)  # one turn: both have taken their thread
        await asyncio.sleep(0.1)  # both running past stuck_after
        health = threads.health()
        refusal = threads.run(lambda: "never runs")
        with pytest.raises(Unavailable) as refused:
            refusal.send(None)  # its first step, before it could wait for anything: refused at once
        release.set()
        await asyncio.gather(*hung)
        after = await threads.run(lambda: "a thread is free again")
        return health, refused.value, after, threads.health()

    health, refused, after, healthy = asyncio.run(scenario())
    assert "2 of 2 threads have run user code for more than 0.05 s" in health["user_code_threads"]
    assert refused.status_code == 503 and refused.retry_after == 2.0
    assert "all 2 threads for synchronous user code on this worker are busy (2 of them" in refused.message
    assert after == "a thread is free again" and healthy == {}


def test_a_request_cancelled_before_its_step_started_gives_its_thread_back():
    threads = UserThreads(4, stuck_after=60)

    async def scenario():
        for _ in range(50):  # cancelled right after submitting: most never reach a thread
            task = asyncio.ensure_future(threads.run(time.sleep, 0))
            await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        deadline = time.monotonic() + 60
        while threads._started and time.monotonic() < deadline:  # those that reached a thread finish there
            await asyncio.sleep(0.01)
        return await threads.run(lambda: "a thread is free")

    assert asyncio.run(scenario()) == "a thread is free"
    assert threads._started == {}, "every slot released"


def test_a_step_runs_with_the_callers_context():
    threads = UserThreads(1, stuck_after=60)

    async def scenario():
        REQUEST_ID.set("r-1")
        return await threads.run(REQUEST_ID.get)

    assert asyncio.run(scenario()) == "r-1", "the trace and request id reach user code's thread"


def test_call_within_gives_up_on_a_call_that_hangs_and_releases_what_it_returns_late():
    go, released, late = threading.Event(), [], threading.Event()

    def release(result):
        released.append(result)
        late.set()

    with pytest.raises(TookTooLong):
        call_within(0.05, lambda: go.wait() and "late", late=release)
    go.set()
    assert late.wait(60)
    assert released == ["late"]
    assert call_within(60, lambda: "in time", late=release) == "in time" and released == ["late"]
    with pytest.raises(SystemExit):
        call_within(60, lambda: (_ for _ in ()).throw(SystemExit(3)))


HANGS_IN_LOAD = """
import pathlib, time
class Preprocess:
    def load(self, local_file_name):
        while not pathlib.Path({go!r}).exists():  # until the test ends
            time.sleep(0.01)
    def process(self, data, state, collect_custom_statistics_fn=None):
        return data
"""

ODD_FAILURES = """
import pathlib, time

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")

class Preprocess:
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        if body["fail"] == "exit":
            raise SystemExit(1)
        if body["fail"] == "interrupt":
            raise KeyboardInterrupt
        if body["fail"] == "unprintable":
            raise Unprintable()
        raise ValueError("x" * 10_000)
    def process(self, data, state, collect_custom_statistics_fn=None):
        return data
    def unload(self):
        pathlib.Path({unloading!r}).touch()
        while not pathlib.Path({go!r}).exists():  # until the test ends
            time.sleep(0.01)
"""

HEALTHY_LOAD_SECONDS = 5.0
"""The load limit beside a load that hangs: what the build waits for that one, and several times what a healthy
endpoint's load takes on a busy machine (its code imported and an HTTP client made: 0.2-1.1 s at a load of 9 here)."""


@pytest.fixture
def go(tmp_path) -> Iterator[Path]:
    """A file whose appearance ends the user code that hangs (a load, an unload), created when the test ends."""
    path = tmp_path / "go"
    yield path
    path.touch()


def build(tmp_path, go: Path, names: tuple[str, ...], load_timeout: float) -> Endpoints:
    """The endpoints `names` of: odd (fails in odd ways, its unload() hangs), hangs (its load() hangs)."""
    code = {
        "odd": ODD_FAILURES.format(go=str(go), unloading=str(tmp_path / "unloading")),
        "hangs": HANGS_IN_LOAD.format(go=str(go)),
    }
    for name in names:
        (tmp_path / f"{name}.py").write_text(code[name])
    file = EndpointsFile(endpoints={n: EndpointConfig(engine="custom", preprocess=f"{n}.py") for n in names})
    triton = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)
    threads = UserThreads(4, stuck_after=60)
    return build_configured(file, triton, "http://127.0.0.1:1/serve", tmp_path, threads, load_timeout)


def test_an_endpoint_whose_load_hangs_is_left_out_in_time_and_the_others_served(tmp_path, go, monkeypatch):
    endpoints = build(tmp_path, go, ("hangs", "odd"), load_timeout=HEALTHY_LOAD_SECONDS)  # returns though the load
    # of 'hangs' lasts until the test ends
    assert endpoints.names() == ["odd"]
    assert f"endpoint 'hangs' did not load in {HEALTHY_LOAD_SECONDS:g} s" in endpoints.errors["hangs"]
    assert "the limit GATEWAY_ENDPOINTS_LOAD_TIMEOUT sets" in endpoints.errors["hangs"]

    monkeypatch.setattr("services.gateway.configured.UNLOAD_TIMEOUT", 0.1)
    endpoints.unload()  # returns though odd's unload() lasts until the test ends: an unload() that hangs is not
    # waited for
    assert (tmp_path / "unloading").exists(), "odd's unload() was called"


@pytest.mark.parametrize(
    ("fail", "expected"),
    [
        ("exit", "SystemExit: 1"),
        ("interrupt", "KeyboardInterrupt"),
        ("unprintable", "Unprintable: (its message cannot be shown: RuntimeError in its __str__)"),
        ("long", "ValueError: " + "x" * 500 + "... (10000 characters)"),
    ],
)
def test_odd_failures_of_user_code_are_a_422_naming_the_stage(tmp_path, go, fail, expected):
    endpoint = build(tmp_path, go, ("odd",), load_timeout=3600).by_name["odd"]  # the limit waits for nothing here

    with pytest.raises(InvalidInput) as failed:
        asyncio.run(endpoint.preprocess({"fail": fail}, {}, lambda values: None))
    assert failed.value.param == "preprocess"
    assert failed.value.message == f"preprocess of endpoint 'odd' failed: {expected}"


EXITING_MODEL = """
class Model:
    def predict(self, rows):
        raise SystemExit(3)

class Preprocess:
    def load(self, local_file_name):
        return Model()
"""


def test_a_model_whose_predict_exits_is_a_422_of_process(tmp_path):
    (tmp_path / "exits.py").write_text(EXITING_MODEL)
    file = EndpointsFile(endpoints={"m": EndpointConfig(engine="sklearn", preprocess="exits.py")})
    triton = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)
    endpoints = build_configured(
        file, triton, "http://127.0.0.1:1/serve", tmp_path, UserThreads(2, stuck_after=60), 3600
    )
    with pytest.raises(InvalidInput) as failed:
        asyncio.run(endpoints.by_name["m"].process([[1.0]], {}, lambda values: None))
    assert failed.value.param == "process" and failed.value.message.endswith("output: SystemExit: 3")
