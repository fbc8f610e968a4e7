"""The file watcher: changes are picked up (also those made while a reload was reading the files), a bad file never
replaces the last good snapshot, a replaced snapshot is unloaded after its grace period, errors are shown without
absolute paths."""

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from services.api.endpoint import Endpoints, PipelineEndpoint
from services.gateway.configured import build_configured
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.file_source import FileWatcher
from services.gateway.watcher import redact_paths
from services.triton.grpc_client import TritonClient
from tests.support.user_code import THREADS


class Named(PipelineEndpoint):
    """An endpoint that notes its unload()."""

    def __init__(self, name: str):
        self.name = name
        self.unloaded = False

    def unload(self) -> None:
        self.unloaded = True


def names(file: EndpointsFile) -> Endpoints:
    """An endpoint of each entry's name (enough to tell which snapshot answered)."""
    return Endpoints({name: Named(name) for name in file.endpoints}, declared=file.metrics)


def unloaded(endpoints: Endpoints) -> bool:
    return all(endpoint.unloaded for endpoint in endpoints.by_name.values())


def write(path, endpoints: dict, bump: int = 0):
    EndpointsFile(endpoints={n: EndpointConfig(**c) for n, c in endpoints.items()}).write(path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump))  # a new stamp even within one clock tick


async def until(condition, seconds: float = 60) -> None:
    """Wait until `condition()` holds (work on another thread, e.g. an unload), failing after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.01)


def test_watcher_swaps_in_a_changed_file_and_keeps_the_last_good_one(tmp_path):
    path = tmp_path / "endpoints.json"
    write(path, {"a": {"engine": "custom"}})
    watcher = FileWatcher(path, names, interval=60)
    assert watcher.names() == ["a"]
    first = watcher.current()

    async def scenario():
        assert not await watcher.check(), "nothing changed"
        write(path, {"a": {"engine": "custom"}, "b": {"engine": "custom"}}, bump=1)
        assert await watcher.check()
        assert watcher.names() == ["a", "b"]
        await until(lambda: unloaded(first))  # the replaced snapshot is unloaded once its grace period is over
        path.write_text("{ not json")
        assert not await watcher.check()
        assert watcher.names() == ["a", "b"], "still serving the previous configuration"
        assert "not valid JSON" in watcher.errors()["endpoints.json"]

    asyncio.run(scenario())


def test_sets_still_waiting_out_the_retire_delay_are_unloaded_when_the_worker_stops(tmp_path):
    path = tmp_path / "endpoints.json"
    write(path, {"a": {"engine": "custom"}})
    watcher = FileWatcher(path, names, interval=60, retire_after=3600)
    first = watcher.current()

    async def scenario():
        await watcher.start()
        write(path, {"b": {"engine": "custom"}}, bump=1)
        assert await watcher.check()
        second = watcher.current()
        write(path, {"c": {"engine": "custom"}}, bump=2)
        assert await watcher.check()
        await asyncio.sleep(0.05)
        assert not unloaded(first) and not unloaded(second), "replaced snapshots wait out the retire delay"
        await watcher.stop()
        assert unloaded(first) and unloaded(second), "the worker stops: nothing waits for them any more"
        assert unloaded(watcher.current()) and not watcher._retiring

    asyncio.run(scenario())


def test_a_file_that_never_loaded_serves_nothing_and_says_why(tmp_path):
    path = tmp_path / "endpoints.json"
    path.write_text("[1]")
    watcher = FileWatcher(path, names, interval=60)
    assert watcher.current() == Endpoints()
    assert "must be an object" in watcher.errors()["endpoints.json"]


def code(path, answer: str, bump: int = 0, gate: tuple[Path, Path] | None = None) -> None:
    """A custom endpoint's preprocess file answering `answer`; with a `gate` (marker, go), its load() creates the
    marker, then lasts until the go file exists."""
    wait = (
        f"pathlib.Path({str(gate[0])!r}).touch()\n"
        f"        while not pathlib.Path({str(gate[1])!r}).exists():\n            time.sleep(0.01)\n"
        if gate
        else "pass\n"
    )
    path.write_text(
        "import pathlib\nimport time\n\n\nclass Preprocess:\n"
        f"    def load(self, local_file_name):\n        {wait}\n"
        f"    def process(self, data, state, collect=None):\n        return {{'answer': {answer!r}}}\n"
    )
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump))


def configured(base_dir: Path):
    """What the gateway loads from an endpoint file in `base_dir`."""
    triton = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)
    return lambda file: build_configured(file, triton, "http://127.0.0.1:1/serve", base_dir, THREADS, 60)


def test_a_preprocess_file_edited_again_during_a_slow_reload_is_served_once_the_reload_ends(tmp_path):
    """The broken version's load() lasts until the fix has been written. Before: the reload stamped the files after
    it had read them, so the fix looked applied and the broken code kept serving."""
    preprocess, path = tmp_path / "pre.py", tmp_path / "endpoints.json"
    loading, go = tmp_path / "loading", tmp_path / "go"
    code(preprocess, "first")
    write(path, {"e": {"engine": "custom", "preprocess": "pre.py"}})
    watcher = FileWatcher(path, configured(tmp_path), interval=60)

    async def answer() -> str:
        return (await watcher.current().by_name["e"].process({}, {}, lambda _: None))["answer"]

    async def scenario():
        assert await answer() == "first"
        code(preprocess, "broken", bump=1, gate=(loading, go))
        reload = asyncio.create_task(watcher.check())
        while not loading.exists():  # the broken version is imported, its load() running
            await asyncio.sleep(0.01)
        code(preprocess, "fixed", bump=2)
        go.touch()
        assert await reload
        assert await answer() == "fixed"
        assert not await watcher.check(), "nothing left to apply"

    try:
        asyncio.run(scenario())
    finally:
        go.touch()  # a load still waiting ends


def test_the_endpoint_file_edited_during_a_slow_reload_is_applied(tmp_path):
    path = tmp_path / "endpoints.json"
    write(path, {"a": {"engine": "custom"}})
    edited = threading.Event()

    def slow_load(file):
        loaded = names(file)  # the file as read before the edit
        if not edited.is_set():
            edited.set()
            write(path, {"a": {"engine": "custom"}, "b": {"engine": "custom"}}, bump=5)
        return loaded

    watcher = FileWatcher(path, names, interval=60)
    watcher.source.load = slow_load
    write(path, {"a": {"engine": "custom"}, "c": {"engine": "custom"}}, bump=1)
    assert asyncio.run(watcher.check())
    assert watcher.names() == ["a", "b"], "the version written during the reload is the one served"


def test_health_errors_name_files_relative_to_the_endpoint_file_and_no_absolute_path(tmp_path):
    path = tmp_path / "endpoints.json"
    (tmp_path / "pre.py").write_text("raise ImportError('broken at /opt/secret/site-packages/x.py')\n")
    write(path, {"e": {"engine": "custom", "preprocess": "pre.py"}, "f": {"engine": "custom", "preprocess": "no.py"}})
    watcher = FileWatcher(path, configured(tmp_path), interval=60)
    errors = watcher.errors()
    print(f"\nconfig errors as /health/ready shows them: {errors}")
    assert set(errors) == {"e", "f"}
    assert "pre.py failed to import" in errors["e"] and "x.py" in errors["e"] and "does not exist" in errors["f"]
    assert str(tmp_path) not in json.dumps(errors) and "/opt/secret" not in json.dumps(errors)
    path.write_text("{ not json")
    asyncio.run(watcher.check())
    assert "endpoints.json" in watcher.errors() and str(tmp_path) not in json.dumps(watcher.errors())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("preprocess file {base}/pre/x.py failed", "preprocess file pre/x.py failed"),
        ("[Errno 2] No such file: '/etc/serving/a b/c.json'", "[Errno 2] No such file: 'c.json'"),
        ("see http://127.0.0.1:8000/serve/x and ./rel/path", "see http://127.0.0.1:8000/serve/x and ./rel/path"),
        ("at /usr/lib/python3.11/json/decoder.py, line 3", "at decoder.py, line 3"),
    ],
)
def test_redact_paths(tmp_path, text, expected):
    assert redact_paths(text.format(base=tmp_path), tmp_path) == expected
