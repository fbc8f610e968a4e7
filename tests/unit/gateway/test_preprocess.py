"""clearml-serving's Preprocess contract: loading the user's file and calling its methods as clearml-serving does."""

import asyncio
import gc
import json
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from services.common.errors import ConfigurationError
from services.gateway.preprocess import UserPreprocess, load_preprocess_class
from tests.support.user_code import THREADS

SYNC_AND_ASYNC = """
class Preprocess:
    def __init__(self):
        self.loaded = None

    def load(self, local_file_name):
        self.loaded = local_file_name
        return {"weights": local_file_name}

    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        state["seen"] = body["x"]
        collect_custom_statistics_fn({"x": body["x"]})
        return body["x"] * 2

    async def postprocess(self, data, state, collect_custom_statistics_fn=None):
        return {"y": data, "seen": state["seen"], "endpoint": self.model_endpoint["name"]}
"""


def user_preprocess(tmp_path, source: str, serving_url: str = "http://127.0.0.1:1/serve/") -> UserPreprocess:
    path = tmp_path / "preprocess.py"
    path.write_text(source)
    return UserPreprocess(path, {"name": "e"}, model_file="w.bin", serving_url=serving_url, threads=THREADS)


def test_methods_are_called_with_state_and_statistics_sync_or_async(tmp_path):
    pre = user_preprocess(tmp_path, SYNC_AND_ASYNC)
    assert pre.model == {"weights": "w.bin"} and pre.instance.loaded == "w.bin"
    assert pre.has("preprocess") and pre.has("postprocess") and not pre.has("process")
    collected, state = [], {}
    data = asyncio.run(pre.call("preprocess", {"x": 21}, state, collected.append))
    result = asyncio.run(pre.call("postprocess", data, state, collected.append))
    assert result == {"y": 42, "seen": 21, "endpoint": "e"}
    assert collected == [{"x": 21}]


class Endpoints(BaseHTTPRequestHandler):
    """Endpoints for send_request to call: `/{prefix}/echo[/version]` answers its path and body, `/x/fail` a 500, and
    `/x/both` answers only once a second call is in at the same time (a barrier: calls one after the other fail)."""

    both = threading.Barrier(2)

    def do_POST(self):  # noqa: N802 - the handler's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        status, answer = 200, {"path": self.path, "data": body}
        if self.path.endswith("/fail"):
            status = 500
        elif self.path.endswith("/both"):
            try:
                self.both.wait(timeout=10)
            except threading.BrokenBarrierError:
                status = 504
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        return None


@pytest.fixture(scope="module")
def endpoints():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoints)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_send_request_from_sync_code_answers_and_each_instance_has_its_own_base_url(tmp_path, endpoints):
    first = user_preprocess(tmp_path, "class Preprocess:\n    pass\n", serving_url=f"{endpoints}/a/")
    second = user_preprocess(tmp_path, "class Preprocess:\n    pass\n", serving_url=f"{endpoints}/b")
    assert first.instance.send_request("echo", "2", {"x": 1}) == {"path": "/a/echo/2", "data": {"x": 1}}
    assert second.instance.send_request("/echo/", data={"y": 2}) == {"path": "/b/echo", "data": {"y": 2}}
    assert first.instance.send_request("fail", data={}) is None, "an error status is None, as in clearml-serving"
    first.unload()
    second.unload()


def test_send_request_from_async_code_is_started_at_once_so_two_calls_run_at_once(tmp_path, endpoints):
    pre = user_preprocess(tmp_path, "class Preprocess:\n    pass\n", serving_url=f"{endpoints}/x")

    async def fan_out():
        first = pre.instance.send_request("both", data={"i": 1})
        second = pre.instance.send_request("both", data={"i": 2})
        answers = [await first, await second]  # awaited one after the other: the calls were in flight together
        failed = await pre.instance.send_request("fail", None, {})
        client = pre.requests._async_client
        await asyncio.to_thread(pre.unload)  # as the watcher unloads: from a thread, the loop still running
        for _ in range(100):
            if client.is_closed:
                break
            await asyncio.sleep(0.01)
        return answers, failed, client.is_closed

    answers, failed, closed = asyncio.run(fan_out())
    assert [answer["data"]["i"] for answer in answers] == [1, 2] and failed is None
    assert closed, "unload() closes the async client on its own loop"


def test_send_request_from_async_code_works_with_every_asyncio_form_and_unawaited_is_no_warning(tmp_path, endpoints):
    pre = user_preprocess(tmp_path, "class Preprocess:\n    pass\n", serving_url=f"{endpoints}/x")
    send = pre.instance.send_request

    async def forms():
        created = asyncio.create_task(send("echo", data={"form": "create_task"}))
        ensured = asyncio.ensure_future(send("echo", data={"form": "ensure_future"}))
        gathered = await asyncio.gather(send("echo", data={"form": "gather"}), send("fail", data={}))
        send("echo", data={"form": "never awaited"})  # still sent; no warning
        answers = [await created, await ensured, *gathered]
        while pre.requests._started:
            await asyncio.sleep(0.01)
        return answers

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        answers = asyncio.run(forms())
        gc.collect()
    assert [a and a["data"]["form"] for a in answers] == ["create_task", "ensure_future", "gather", None]
    pre.unload()


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("x = 1\n", "defines no class Preprocess"),
        ("import not_a_module_anywhere\n", "failed to import"),
        ("class Preprocess(:\n", "failed to import"),
    ],
)
def test_broken_files_are_refused_when_loaded(tmp_path, source, says):
    path = tmp_path / "bad.py"
    path.write_text(source)
    with pytest.raises(ConfigurationError, match=says):
        load_preprocess_class(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_preprocess_class(tmp_path / "nope.py")
