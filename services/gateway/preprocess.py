"""clearml-serving's preprocessing contract: a Python file (or a package folder with `__init__.py`) defining
`class Preprocess` with any of

    load(local_file_name)                                   -> model object (a model engine uses it if not None)
    preprocess(body, state, collect_custom_statistics_fn)   -> data for the engine
    process(data, state, collect_custom_statistics_fn)      -> model output (custom engines; see `engines`)
    postprocess(data, state, collect_custom_statistics_fn)  -> JSON-able dict
    unload()                                                 <- this project's addition: when the endpoint is
                                                                replaced or removed, the worker stops, or
                                                                `serving endpoints add` has checked the file

each sync or async: one instance per endpoint and worker, a fresh `state` dict per request, `self.model_endpoint`
with clearml-serving's field names (`ClearMLModelEndpoint`). Sync methods run on one of the worker's threads for user
code (`user_threads`) and async ones on the event loop, so neither blocks the worker's other requests.

`self.send_request(endpoint, version, data)` calls another endpoint at `GATEWAY_SERVING_BASE_URL`, as
clearml-serving's does: from sync code (on its thread) it returns the answer; from async code (on the event loop,
clearml-serving's custom_async engine) it returns an awaitable, already started, so two calls made before either is
awaited run at once. Either way the answer is the JSON dict, or None when the endpoint answered an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from services.common.errors import ConfigurationError
from services.gateway.user_threads import UserThreads


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


def load_preprocess_class(path: Path) -> type[Any]:
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
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"preprocess file {path} cannot be imported (not a Python file or package)")
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

    def __init__(
        self,
        path: Path,
        endpoint: ClearMLModelEndpoint,
        *,
        model_file: str | None,
        serving_url: str,
        threads: UserThreads,
    ):
        cls = load_preprocess_class(path)
        self.threads = threads
        self.requests = EndpointRequests(serving_url)
        cls.send_request = self.requests.method()
        try:
            self.instance = cls()
            self.instance.model_endpoint = endpoint
            self.model = None
            """What the user's load() returned (a model engine predicts with it when it is not None)."""
            if callable(getattr(self.instance, "load", None)):
                self.model = self.instance.load(model_file)
        except Exception as exc:
            raise ConfigurationError(f"preprocess file {path}: Preprocess() or its load() failed: {exc}") from exc

    def has(self, method: str) -> bool:
        return callable(getattr(self.instance, method, None))

    def is_async(self, method: str) -> bool:
        return inspect.iscoroutinefunction(getattr(self.instance, method, None))

    async def call(self, method: str, data: Any, state: dict, collect: Callable[[dict], None]) -> Any:
        function = getattr(self.instance, method)
        if inspect.iscoroutinefunction(function):
            return await function(data, state, collect)
        result = await self.threads.run(function, data, state, collect)
        if inspect.isawaitable(result):
            result = await result
        return result

    def unload(self) -> None:
        try:
            if self.has("unload"):
                self.instance.unload()
        finally:
            self.requests.close()


class EndpointRequests:
    """`send_request` of one Preprocess class: HTTP calls to the gateway's endpoints, over pooled connections."""

    TIMEOUT = 60.0

    def __init__(self, serving_url: str):
        self.serving_url = serving_url.rstrip("/")
        self._client = httpx.Client(timeout=self.TIMEOUT)
        self._async_client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started: set[asyncio.Task] = set()
        """The event loop the async client belongs to (unload() runs on a thread; the client is closed on its loop)."""

    def url(self, endpoint: str, version: str | None) -> str:
        path = f"{endpoint.strip('/')}/{version.strip('/')}" if version else endpoint.strip("/")
        return f"{self.serving_url}/{path}"

    def method(self) -> Callable[..., Any]:
        requests = self

        def send_request(_self: object, endpoint: str, version: str | None = None, data: dict | None = None) -> Any:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # sync code, on its worker thread: wait for the answer
                return requests.send(endpoint, version, data)
            return StartedRequest(requests.start(endpoint, version, data))

        return send_request

    def start(self, endpoint: str, version: str | None, data: dict | None) -> asyncio.Task:
        """The request sent at once, as a task this object keeps until it is done (awaited or not)."""
        task = asyncio.get_running_loop().create_task(self.send_async(endpoint, version, data))
        self._started.add(task)
        task.add_done_callback(self._started.discard)
        return task

    def send(self, endpoint: str, version: str | None, data: dict | None) -> dict | None:
        return _answer(self._client.post(self.url(endpoint, version), json=data))

    async def send_async(self, endpoint: str, version: str | None, data: dict | None) -> dict | None:
        if self._async_client is None:
            self._async_client, self._loop = httpx.AsyncClient(timeout=self.TIMEOUT), asyncio.get_running_loop()
        return _answer(await self._async_client.post(self.url(endpoint, version), json=data))

    def close(self) -> None:
        self._client.close()
        client, self._async_client = self._async_client, None
        if client is not None and self._loop is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(client.aclose(), self._loop)  # works from unload()'s thread too


class StartedRequest(Coroutine):
    """What `send_request` returns in async code: a request already under way, awaitable as clearml-serving's is and
    a coroutine too, so `asyncio.create_task`, `ensure_future` and `gather` take it. Never awaited, it is no error
    (the request still runs to its end), so no "never awaited" warning either."""

    def __init__(self, task: asyncio.Task):
        self.task = task
        self._steps: Generator | None = None

    def __await__(self) -> Generator:
        return self.task.__await__()

    def send(self, value: Any) -> Any:
        if self._steps is None:
            self._steps = self.task.__await__()
        return self._steps.send(value)

    def throw(self, error: Any, *args: Any) -> Any:
        if self._steps is None:
            self._steps = self.task.__await__()
        return self._steps.throw(error, *args)

    def close(self) -> None:
        if self._steps is not None:
            self._steps.close()


def _answer(response: httpx.Response) -> dict | None:
    """clearml-serving's answer to `send_request`: the JSON of a success, None for an error status."""
    return response.json() if response.is_success else None
