"""User code that hangs or fails in odd ways (`services.gateway.user_threads`, `services.gateway.configured`): a step
that never returns keeps one thread and is reported, and past the last free thread new steps are refused at once;
an endpoint whose load() hangs is left out within the limit while the others are served; an unload() that hangs is
not waited for; SystemExit, KeyboardInterrupt and an exception whose str() fails are a 422 naming the stage."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from services.common.errors import InvalidInput, Unavailable
from services.gateway.configured import ConfiguredEndpoints
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.user_threads import TookTooLong, UserThreads, call_within
from services.triton.grpc_client import TritonClient

REQUEST_ID = contextvars.ContextVar("request_id", default=None)


def test_steps_past_the_last_free_thread_are_refused_at_once_and_stuck_ones_are_reported():
    release = threading.Event()
    threads = UserThreads(2, stuck_after=0.05, retry_after=2.0)

    async def scenario():
        hung = [asyncio.ensure_future(threads.run(release.wait)) for _ in range(2)]
        await asyncio.sleep(0.1)  # both running past stuck_after
        health = threads.health()
        started = time.monotonic()
        with pytest.raises(Unavailable) as refused:
            await threads.run(lambda: "never runs")
        waited = time.monotonic() - started
        release.set()
        await asyncio.gather(*hung)
        after = await threads.run(lambda: "a thread is free again")
        return health, refused.value, waited, after, threads.health()

    health, refused, waited, after, healthy = asyncio.run(scenario())
    assert "2 of 2 threads have run user code for more than 0.05 s" in health["user_code_threads"]
    assert refused.status_code == 503 and refused.retry_after == 2.0 and waited < 0.5
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
        await asyncio.sleep(0.1)
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
    released = []
    with pytest.raises(TookTooLong):
        call_within(0.05, lambda: time.sleep(0.2) or "late", late=released.append)
    time.sleep(0.3)
    assert released == ["late"]
    assert call_within(1, lambda: "in time", late=released.append) == "in time" and released == ["late"]
    with pytest.raises(SystemExit):
        call_within(1, lambda: (_ for _ in ()).throw(SystemExit(3)))


HANGS_IN_LOAD = """
import time
class Preprocess:
    def load(self, local_file_name):
        time.sleep(30)
    def process(self, data, state, collect_custom_statistics_fn=None):
        return data
"""

ODD_FAILURES = """
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
        import time
        time.sleep(30)
"""


def build(tmp_path, load_timeout: float) -> ConfiguredEndpoints:
    (tmp_path / "hangs.py").write_text(HANGS_IN_LOAD)
    (tmp_path / "odd.py").write_text(ODD_FAILURES)
    file = EndpointsFile(
        endpoints={
            "hangs": EndpointConfig(engine="custom", preprocess="hangs.py"),
            "odd": EndpointConfig(engine="custom", preprocess="odd.py"),
        }
    )
    triton = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)
    threads = UserThreads(4, stuck_after=60)
    return ConfiguredEndpoints.build(file, triton, "http://127.0.0.1:1/serve", tmp_path, threads, load_timeout)


def test_an_endpoint_whose_load_hangs_is_left_out_in_time_and_the_others_served(tmp_path, monkeypatch):
    started = time.monotonic()
    endpoints = build(tmp_path, load_timeout=0.3)
    assert time.monotonic() - started < 5
    assert endpoints.names() == ["odd"]
    assert "endpoint 'hangs' did not load in 0.3 s" in endpoints.errors["hangs"]
    assert "the limit GATEWAY_ENDPOINTS_LOAD_TIMEOUT sets" in endpoints.errors["hangs"]

    monkeypatch.setattr("services.gateway.configured.UNLOAD_TIMEOUT", 0.1)
    started = time.monotonic()
    endpoints.unload()  # odd's unload() sleeps 30 s
    assert time.monotonic() - started < 2, "an unload() that hangs is not waited for"


@pytest.mark.parametrize(
    ("fail", "expected"),
    [
        ("exit", "SystemExit: 1"),
        ("interrupt", "KeyboardInterrupt"),
        ("unprintable", "Unprintable: (its message cannot be shown: RuntimeError in its __str__)"),
        ("long", "ValueError: " + "x" * 500 + "... (10000 characters)"),
    ],
)
def test_odd_failures_of_user_code_are_a_422_naming_the_stage(tmp_path, fail, expected):
    endpoint = build(tmp_path, load_timeout=0.3).get("odd")

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
    endpoints = ConfiguredEndpoints.build(
        file, triton, "http://127.0.0.1:1/serve", tmp_path, UserThreads(2, stuck_after=60), 5
    )
    with pytest.raises(InvalidInput) as failed:
        asyncio.run(endpoints.get("m").process([[1.0]], {}, lambda values: None))
    assert failed.value.param == "process" and failed.value.message.endswith("output: SystemExit: 3")
