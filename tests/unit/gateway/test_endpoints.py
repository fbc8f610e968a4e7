"""The endpoint file and its watcher: changes are picked up, a bad file never replaces the last good one."""

import asyncio
import json
import os

import pytest

from services.common.errors import ConfigurationError
from services.gateway.endpoints import ChainedResolver, EndpointConfig, EndpointsFile, FileWatcher


class Registry:
    def __init__(self, file: EndpointsFile):
        self.known = sorted(file.endpoints)

    @classmethod
    def load(cls, path):
        return cls(EndpointsFile.read(path))

    def get(self, name):
        return name if name in self.known else None

    def names(self):
        return self.known


def write(path, endpoints: dict, bump: int = 0):
    EndpointsFile(endpoints={n: EndpointConfig(**c) for n, c in endpoints.items()}).write(path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump))  # a new stamp even within one clock tick


def test_missing_file_is_no_endpoints_and_write_is_atomic(tmp_path):
    path = tmp_path / "endpoints.json"
    assert EndpointsFile.read(path).endpoints == {}
    write(path, {"a": {"engine": "custom"}})
    assert json.loads(path.read_text())["endpoints"] == {"a": {"engine": "custom"}}
    assert not list(tmp_path.glob("*.tmp"))


def test_a_bad_entry_is_reported_and_the_others_are_kept(tmp_path):
    path = tmp_path / "endpoints.json"
    path.write_text('{"endpoints": {"a": {"engine": "tensorflow"}, "b": {"engine": "custom"}}}')
    read = EndpointsFile.read(path)
    assert list(read.endpoints) == ["b"]
    assert read.invalid == {"a": "field 'engine': Input should be 'triton', 'onnxruntime' or 'custom'"}


@pytest.mark.parametrize("text", ["{ not json", "[1, 2]", '{"endpoints": [1]}'])
def test_a_file_that_is_not_an_endpoint_object_is_a_configuration_error_naming_it(tmp_path, text):
    path = tmp_path / "endpoints.json"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=str(path)):
        EndpointsFile.read(path)


def test_watcher_swaps_in_a_changed_file_and_keeps_the_last_good_one(tmp_path):
    path = tmp_path / "endpoints.json"
    write(path, {"a": {"engine": "custom"}})
    watcher = FileWatcher(path, Registry.load, interval=60)
    assert watcher.resolve("a") == "a" and watcher.resolve("b") is None

    async def scenario():
        assert not await watcher.check(), "nothing changed"
        write(path, {"a": {"engine": "custom"}, "b": {"engine": "custom"}}, bump=1)
        assert await watcher.check()
        assert watcher.resolve("b") == "b"
        path.write_text("{ not json")
        assert not await watcher.check()
        assert watcher.resolve("b") == "b", "still serving the previous configuration"
        assert "not valid JSON" in watcher.errors()[str(path)]

    asyncio.run(scenario())


def test_chained_resolvers_are_asked_in_order_and_list_every_name(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    write(first, {"x": {"engine": "custom"}})
    write(second, {"x": {"engine": "custom"}, "y": {"engine": "custom"}})
    a, b = FileWatcher(first, Registry.load, 60), FileWatcher(second, Registry.load, 60)
    a.current.get = lambda name: f"first:{name}" if name in a.current.known else None
    chain = ChainedResolver(a, b)
    assert chain.resolve("x") == "first:x" and chain.resolve("y") == "y" and chain.resolve("z") is None
    assert chain.names() == ["x", "x", "y"]
