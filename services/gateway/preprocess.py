"""clearml-serving's preprocessing contract: a Python file (or a package folder with `__init__.py`) defining
`class Preprocess` with any of

    load(local_file_name)                                   -> model object (custom engine)
    preprocess(body, state, collect_custom_statistics_fn)   -> data for the engine
    process(data, state, collect_custom_statistics_fn)      -> model output (custom engine)
    postprocess(data, state, collect_custom_statistics_fn)  -> JSON-able dict
    unload()                                                 <- when the endpoint is removed or the worker stops

each sync or async, called as clearml-serving calls them: one instance per worker, a fresh `state` dict per request,
`self.model_endpoint` with clearml-serving's field names (`ClearMLModelEndpoint`). Sync methods run on a worker
thread and async ones on the event loop, so neither blocks the other requests of the worker.
`self.send_request(endpoint, version, data)` calls another endpoint (sync, for sync methods) and
`await self.async_send_request(endpoint, version, data)` does the same without blocking (async methods, pipelines
of endpoints as clearml-serving's custom_async engine runs them); both go to `GATEWAY_SERVING_BASE_URL`.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from services.common.errors import ConfigurationError


@dataclass
class ClearMLModelEndpoint:
    """`self.model_endpoint` as clearml-serving's preprocess code reads it (and `model`, this project's name for
    `model_id`)."""

    engine_type: str
    serving_url: str
    model_id: str | None
    version: str | None
    input_name: list[str] = field(default_factory=list)
    input_type: list[str] = field(default_factory=list)
    input_size: list[list[int]] = field(default_factory=list)
    output_name: list[str] = field(default_factory=list)
    output_type: list[str] = field(default_factory=list)
    output_size: list[list[int]] = field(default_factory=list)
    auxiliary_cfg: dict | None = None

    @property
    def model(self) -> str | None:
        return self.model_id

    @classmethod
    def from_config(cls, endpoint: str, config: Any) -> ClearMLModelEndpoint:
        return cls(
            engine_type=config.engine,
            serving_url=endpoint,
            model_id=config.model,
            version=config.version,
            input_name=[t.name for t in config.inputs],
            input_type=[t.numpy_dtype.__name__ for t in config.inputs],
            input_size=[t.shape for t in config.inputs],
            output_name=[t.name for t in config.outputs],
            output_type=[t.numpy_dtype.__name__ for t in config.outputs],
            output_size=[t.shape for t in config.outputs],
            auxiliary_cfg=getattr(config, "auxiliary_cfg", None),
        )


def load_preprocess_class(path: Path) -> type:
    """The Preprocess class of a file, or of a package folder (its `__init__.py`, which may import its siblings)."""
    path = Path(path)
    package = path.is_dir()
    entry = path / "__init__.py" if package else path
    if not entry.is_file():
        what = "package folder (with __init__.py)" if package else "file"
        raise ConfigurationError(f"preprocess {what} {path} does not exist")
    module_name = "preprocess_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    locations = [str(path)] if package else None
    spec = importlib.util.spec_from_file_location(module_name, entry, submodule_search_locations=locations)
    for loaded in [m for m in sys.modules if m == module_name or m.startswith(module_name + ".")]:
        del sys.modules[loaded]  # a reload after an edit imports the package's modules afresh
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # relative imports inside a package need it
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ConfigurationError(f"preprocess file {path} failed to import: {exc}") from exc
    if not hasattr(module, "Preprocess"):
        raise ConfigurationError(f"preprocess file {path} defines no class Preprocess")
    return module.Preprocess


def source_stamp(path: Path) -> tuple:
    """Changes when the preprocess code changes: an edit reloads the endpoint. A file deleted while it is being
    stamped is a change too, never an error (the watcher polls this)."""
    path = Path(path)
    try:
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    except OSError:
        return (str(path), None)
    stamps = []
    for file in files:
        try:
            stat = file.stat()
        except OSError:
            continue
        stamps.append((str(file), stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


class UserPreprocess:
    """One user Preprocess instance and how to call each of its methods."""

    def __init__(self, path: Path, endpoint: ClearMLModelEndpoint, *, model_file: str | None, serving_url: str):
        cls = load_preprocess_class(path)
        self.serving_url = serving_url.rstrip("/")
        cls.send_request = _send_request(self.serving_url)
        cls.async_send_request = _async_send_request(self.serving_url)
        try:
            self.instance = cls()
            self.instance.model_endpoint = endpoint
            self.model = None
            if callable(getattr(self.instance, "load", None)):
                self.model = self.instance.load(model_file)
        except Exception as exc:
            raise ConfigurationError(f"preprocess file {path}: Preprocess() or its load() failed: {exc}") from exc

    def has(self, method: str) -> bool:
        return callable(getattr(self.instance, method, None))

    async def call(self, method: str, data: Any, state: dict, collect: Callable[[dict], None]) -> Any:
        function = getattr(self.instance, method)
        if inspect.iscoroutinefunction(function):
            return await function(data, state, collect)
        result = await asyncio.to_thread(function, data, state, collect)
        if inspect.isawaitable(result):
            result = await result
        return result

    def unload(self) -> None:
        if self.has("unload"):
            self.instance.unload()


def _url(serving_url: str, endpoint: str, version: str | None) -> str:
    path = f"{endpoint.strip('/')}/{version.strip('/')}" if version else endpoint.strip("/")
    return f"{serving_url}/{path}"


def _send_request(serving_url: str):
    def send_request(_self, endpoint: str, version: str | None = None, data: dict | None = None) -> dict | None:
        response = httpx.post(_url(serving_url, endpoint, version), json=data, timeout=60)
        return response.json() if response.is_success else None

    return send_request


def _async_send_request(serving_url: str):
    async def async_send_request(
        _self, endpoint: str, version: str | None = None, data: dict | None = None
    ) -> dict | None:
        async with httpx.AsyncClient(timeout=60) as client:
            response = await client.post(_url(serving_url, endpoint, version), json=data)
        return response.json() if response.is_success else None

    return async_send_request
