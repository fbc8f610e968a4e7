"""Endpoints are configuration: a JSON file declares each endpoint's engine, Triton model, preprocess code and
tensors. Workers reload it when it changes, building the new registry beside the old one and swapping it in one
assignment: requests in flight finish on the old one, no request waits for the reload (clearml-serving pauses all
traffic on a change; this does not).

    {"endpoints": {"sst2": {"engine": "triton", "model": "encoder", "preprocess": "preprocess.py",
                            "inputs": [{"name": "input_ids", "dtype": "INT64", "shape": [-1, -1]}, ...],
                            "outputs": [{"name": "logits", "dtype": "FP32", "shape": [-1, 2]}]}}}
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from observability import metrics
from services.common.contract import TensorSpec
from services.common.errors import ConfigurationError
from services.monitoring.statistics import EndpointMetrics

log = logging.getLogger(__name__)


class EndpointConfig(BaseModel):
    engine: Literal["triton", "onnxruntime", "custom"] = "triton"
    """triton: send the preprocess output to a Triton model over gRPC; onnxruntime: run an exported model
    in-process; custom: the preprocess class's own `process`."""
    model: str | None = None
    """triton: the Triton model name; onnxruntime: an exported model directory (manifest.json, model.onnx)."""
    model_version: str = ""
    """Triton model version ('' = Triton's policy)."""
    version: str | None = None
    """The version in /serve/{endpoint}/{version}; None accepts any."""
    preprocess: str | None = None
    """Path of a Python file defining `class Preprocess` (clearml-serving's contract)."""
    model_file: str | None = None
    """Passed to `Preprocess.load(local_file_name)`."""
    inputs: list[TensorSpec] = Field(default_factory=list)
    outputs: list[TensorSpec] = Field(default_factory=list)


class EndpointsFile(BaseModel):
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)
    metrics: dict[str, EndpointMetrics] = Field(default_factory=dict)
    """Custom statistics declared per endpoint name (`serving metrics add`): for configured, deployed or built-in
    endpoints alike."""
    invalid: dict[str, str] = Field(default_factory=dict, exclude=True)
    """Entries that failed validation, with what to fix; the valid ones are still served."""

    @classmethod
    def read(cls, path: Path) -> EndpointsFile:
        """Each entry validated on its own: one bad entry never hides the others. A file that is not a JSON object
        of endpoints at all is a ConfigurationError."""
        if not path.is_file():
            return cls()
        try:
            raw = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"endpoint file {path} is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigurationError(f'endpoint file {path} must be an object {{"endpoints": {{NAME: {{...}}}}}}')
        endpoints, metrics, invalid = {}, {}, {}
        for section, model, found in (("endpoints", EndpointConfig, endpoints), ("metrics", EndpointMetrics, metrics)):
            entries = raw.get(section, {})
            if not isinstance(entries, dict):
                raise ConfigurationError(f'endpoint file {path}: "{section}" must be an object keyed by endpoint name')
            for name, entry in entries.items():
                try:
                    found[name] = model.model_validate(entry)
                except ValidationError as exc:
                    error = exc.errors()[0]
                    field = ".".join(str(part) for part in error["loc"]) or "(entry)"
                    where = name if section == "endpoints" else f"metrics of '{name}'"
                    invalid[where] = f"field '{field}': {error['msg'].removeprefix('Value error, ')}"
        return cls(endpoints=endpoints, metrics=metrics, invalid=invalid)

    def write(self, path: Path) -> None:
        """Atomic replace, so a worker never reads a half-written file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        entries = {name: config.model_dump(exclude_defaults=True) for name, config in self.endpoints.items()}
        declared = {name: item.model_dump(exclude_defaults=True) for name, item in self.metrics.items()}
        tmp.write_text(json.dumps({"endpoints": entries, "metrics": declared}, indent=2) + "\n")
        os.replace(tmp, path)


def file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


class FileWatcher:
    """An endpoint resolver over a configuration file: polls it; on a change builds a new registry off the event
    loop with `load(path)` and swaps it in. A file that fails to load leaves the previous registry serving."""

    def __init__(self, path: Path, load, interval: float, retire_after: float = 30.0):
        self.path = path
        self.load = load  # Path -> registry with get(name) and names()
        self.interval = interval
        self.retire_after = retire_after
        """Seconds a replaced registry stays loaded (its requests in flight finish) before its unload() runs."""
        self.error: str | None = None
        try:
            self.current = load(path)
        except Exception as exc:  # noqa: BLE001 - start serving what else there is; report the file's problem
            self.current = EmptyRegistry()
            self.error = str(exc)
            log.error("%s not applied: %s", path, exc)
        self.stamp = self._stamp()
        self._report()
        self._task: asyncio.Task | None = None
        self._retiring: set[asyncio.Task] = set()

    def _stamp(self) -> tuple:
        """The file's, and the preprocess code's it names (an edit to a preprocess file reloads it too)."""
        sources = getattr(self.current, "source_stamps", None)
        return (file_stamp(self.path), sources() if sources else ())

    def resolve(self, name: str):
        return self.current.get(name)

    def names(self) -> list[str]:
        return self.current.names()

    def declared(self, name: str):
        return getattr(self.current, "metrics", {}).get(name)

    def errors(self) -> dict[str, str]:
        """What is wrong with the file (key: its path) or with entries in it (key: the endpoint)."""
        errors = dict(getattr(self.current, "errors", {}))
        if self.error:
            errors[str(self.path)] = f"{self.error} (still serving the previous configuration)"
        return errors

    def _report(self) -> None:
        metrics.CONFIG_ERRORS.labels(self.path.name).set(len(self.errors()))

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        for task in self._retiring:
            task.cancel()
        if hasattr(self.current, "unload"):
            await asyncio.to_thread(self.current.unload)

    async def _retire(self, registry) -> None:
        await asyncio.sleep(self.retire_after)
        await asyncio.to_thread(registry.unload)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    async def check(self) -> bool:
        stamp = self._stamp()
        if stamp == self.stamp:
            return False
        try:
            registry = await asyncio.to_thread(self.load, self.path)
        except Exception as exc:  # noqa: BLE001 - keep serving the last good configuration
            log.error("%s not applied, still serving the previous configuration: %s", self.path, exc)
            self.stamp, self.error = stamp, str(exc)
            self._report()
            return False
        previous = self.current
        self.current, self.error = registry, None
        self.stamp = self._stamp()
        self._report()
        if hasattr(previous, "unload"):
            task = asyncio.get_running_loop().create_task(self._retire(previous))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        for name, problem in getattr(registry, "errors", {}).items():
            log.error("%s: endpoint '%s' not served: %s", self.path, name, problem)
        log.info("configuration reloaded from %s", self.path)
        return True


class EmptyRegistry:
    def get(self, name: str):
        return None

    def names(self) -> list[str]:
        return []


class ChainedResolver:
    """Several resolvers asked in order (deployed endpoints first, then configured ones)."""

    def __init__(self, *resolvers):
        self.resolvers = resolvers

    def resolve(self, name: str):
        for resolver in self.resolvers:
            found = resolver.resolve(name)
            if found is not None:
                return found
        return None

    def names(self) -> list[str]:
        return [name for resolver in self.resolvers for name in resolver.names()]

    def errors(self) -> dict[str, str]:
        return {key: error for resolver in self.resolvers for key, error in resolver.errors().items()}

    def declared(self, name: str):
        return next((found for r in self.resolvers if (found := r.declared(name)) is not None), None)

    async def start(self) -> None:
        for resolver in self.resolvers:
            await resolver.start()

    async def stop(self) -> None:
        for resolver in self.resolvers:
            await resolver.stop()
