"""The endpoint file and its watcher: changes are picked up, a bad file never replaces the last good one."""

import asyncio
import json
import os

import pytest

from services.common.errors import ConfigurationError
from services.gateway.endpoints import EndpointConfig, EndpointsFile, EndpointWatcher


class Registry:
    def __init__(self, file: EndpointsFile):
        self.names = sorted(file.endpoints)

    def get(self, name):
        return name if name in self.names else None


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


def test_an_invalid_file_is_a_configuration_error_naming_it(tmp_path):
    path = tmp_path / "endpoints.json"
    path.write_text('{"endpoints": {"a": {"engine": "tensorflow"}}}')
    with pytest.raises(ConfigurationError, match=str(path)):
        EndpointsFile.read(path)


def test_watcher_swaps_in_a_changed_file_and_keeps_the_last_good_one(tmp_path):
    path = tmp_path / "endpoints.json"
    write(path, {"a": {"engine": "custom"}})
    watcher = EndpointWatcher(path, Registry, interval=60)
    assert watcher.resolve("a") == "a" and watcher.resolve("b") is None

    async def scenario():
        assert not await watcher.check(), "nothing changed"
        write(path, {"a": {"engine": "custom"}, "b": {"engine": "custom"}}, bump=1)
        assert await watcher.check()
        assert watcher.resolve("b") == "b"
        path.write_text("{ not json")
        assert not await watcher.check()
        assert watcher.resolve("b") == "b", "still serving the previous configuration"

    asyncio.run(scenario())
