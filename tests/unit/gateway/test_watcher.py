"""The file watcher and the chained resolver: changes are picked up, a bad file never replaces the last good set, a
replaced set is unloaded after its grace period, and resolvers are asked in order."""

import asyncio
import os

from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.resolvers import ChainedResolver
from services.gateway.watcher import EndpointSet, FileWatcher


class Names:
    """An EndpointSet whose endpoints are their own names (enough to tell which set answered)."""

    def __init__(self, file: EndpointsFile, prefix: str = ""):
        self.known = sorted(file.endpoints)
        self.prefix = prefix
        self.errors: dict[str, str] = {}
        self.metrics = file.metrics
        self.unloaded = False

    @classmethod
    def load(cls, path) -> EndpointSet:
        return cls(EndpointsFile.read(path))

    def get(self, name):
        return self.prefix + name if name in self.known else None

    def names(self):
        return self.known

    def source_stamps(self) -> tuple:
        return ()

    def unload(self) -> None:
        self.unloaded = True


def write(path, endpoints: dict, bump: int = 0):
    EndpointsFile(endpoints={n: EndpointConfig(**c) for n, c in endpoints.items()}).write(path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + bump))  # a new stamp even within one clock tick


def test_watcher_swaps_in_a_changed_file_and_keeps_the_last_good_one(tmp_path):
    path = tmp_path / "endpoints.json"
    write(path, {"a": {"engine": "custom"}})
    watcher = FileWatcher(path, Names.load, interval=60)
    assert watcher.resolve("a") == "a" and watcher.resolve("b") is None
    first = watcher.current

    async def scenario():
        assert not await watcher.check(), "nothing changed"
        write(path, {"a": {"engine": "custom"}, "b": {"engine": "custom"}}, bump=1)
        assert await watcher.check()
        assert watcher.resolve("b") == "b"
        await asyncio.sleep(0.05)
        assert first.unloaded, "the replaced set is unloaded once its grace period is over"
        path.write_text("{ not json")
        assert not await watcher.check()
        assert watcher.resolve("b") == "b", "still serving the previous configuration"
        assert "not valid JSON" in watcher.errors()[str(path)]

    asyncio.run(scenario())


def test_a_file_that_never_loaded_serves_nothing_and_says_why(tmp_path):
    path = tmp_path / "endpoints.json"
    path.write_text("[1]")
    watcher = FileWatcher(path, Names.load, interval=60)
    assert watcher.names() == [] and watcher.resolve("a") is None and watcher.declared("a") is None
    assert "must be an object" in watcher.errors()[str(path)]


def test_chained_resolvers_are_asked_in_order_and_list_every_name(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    write(first, {"x": {"engine": "custom"}})
    write(second, {"x": {"engine": "custom"}, "y": {"engine": "custom"}})
    a, b = FileWatcher(first, Names.load, 60), FileWatcher(second, Names.load, 60)
    a.current.prefix = "first:"
    chain = ChainedResolver(a, b)
    assert chain.resolve("x") == "first:x" and chain.resolve("y") == "y" and chain.resolve("z") is None
    assert chain.names() == ["x", "x", "y"]
