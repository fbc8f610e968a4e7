"""Configured endpoints, of every engine the endpoint file declares (`engines`): clearml-serving's preprocess ->
engine -> postprocess. Each endpoint is a `PipelineEndpoint`: its run (`PipelineRun`) calls its steps and times them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from services.api.dataplane import PipelineRun
from services.common.backend import Collect
from services.common.errors import InvalidInput, NotFound, ServingError
from services.common.names import shown
from services.common.onnx_runner import OnnxModel
from services.gateway import engines
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.preprocess import ClearMLModelEndpoint, UserPreprocess, source_stamp
from services.gateway.user_errors import describe, not_users
from services.gateway.user_threads import TookTooLong, UserThreads, call_within
from services.monitoring.statistics import EndpointMetrics
from services.triton.grpc_client import TritonClient

log = logging.getLogger(__name__)


@dataclass
class ConfiguredEndpoint(PipelineRun):
    name: str
    config: EndpointConfig
    triton: TritonClient
    preprocess_code: UserPreprocess | None
    onnx: OnnxModel | None
    threads: UserThreads
    model: Any = None
    """A model engine's model (sklearn, xgboost, lightgbm)."""

    @property
    def version(self) -> str:
        return self.config.version or "1"

    @property
    def engine(self) -> engines.Engine:
        return engines.get(self.config.engine)

    @property
    def stage(self) -> str:
        return self.engine.stage

    def accept(self, version: str | None) -> None:
        if version is not None and self.config.version is not None and version != self.config.version:
            available = self.config.version
            raise NotFound(f"endpoint '{self.name}' has no version {shown(version)}; available: '{available}'")

    async def preprocess(self, body: Any, state: dict, collect: Collect) -> Any:
        try:
            return await self._user_step("preprocess", body, state, collect)
        except InvalidInput as exc:
            if not isinstance(body, bytes) or exc.param != "preprocess":
                raise
            hint = " (it got the body as bytes: for parsed JSON send -H 'Content-Type: application/json', or none)"
            raise InvalidInput(exc.message + hint, param="preprocess") from None

    async def process(self, data: Any, state: dict, collect: Collect) -> Any:
        """The engine's step (`engines`): the user's `process` where the engine calls it, else the engine's own."""
        if self._calls_user_process():
            return await self._user_step("process", data, state, collect)
        return await self.engine.run(self, data)

    def _calls_user_process(self) -> bool:
        code, calls = self.preprocess_code, self.engine.user_process
        if code is None or calls == "never" or not code.has("process"):
            return False
        return calls == "always" or code.is_async("process")

    async def postprocess(self, data: Any, state: dict, collect: Collect) -> Any:
        return await self._user_step("postprocess", data, state, collect)

    async def _user_step(self, method: str, data: Any, state: dict, collect: Collect) -> Any:
        """Call the user's `method` if the Preprocess class has it. An exception in user code is a 422 naming the
        stage (the caller's error body carries the request id), logged with the traceback under that request id
        (up to the worker's burst of 422 lines: `observability.repeats`): never an opaque 500."""
        if not (self.preprocess_code and self.preprocess_code.has(method)):
            return data
        try:
            return await self.preprocess_code.call(method, data, state, collect)
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt from user code: a 422 too
            if not_users(exc):
                raise
            log.error("%s of endpoint '%s' failed", method, self.name, exc_info=exc, extra={"status": 422})
            raise InvalidInput(f"{method} of endpoint '{self.name}' failed: {describe(exc)}", param=method) from None


def check_config(name: str, config: EndpointConfig) -> None:
    """What the configuration itself must say, with the fix; raised as ConfigurationError."""
    engines.get(config.engine).check(name, config)


def model_file(config: EndpointConfig, base_dir: Path) -> str | None:
    """The model file as `load()` and the model engines get it: a relative path that exists beside the endpoint
    file is taken from there; anything else is passed as written."""
    if config.model_file and not Path(config.model_file).is_absolute() and (base_dir / config.model_file).exists():
        return str(base_dir / config.model_file)
    return config.model_file


def build_endpoint(
    name: str,
    config: EndpointConfig,
    triton: TritonClient,
    serving_url: str,
    base_dir: Path,
    threads: UserThreads,
    unpickle: bool = True,
) -> ConfiguredEndpoint:
    """One entry of the endpoint file, loaded: its preprocess code imported (and its load() called), its model
    opened (a pickle only checked, not loaded, unless `unpickle`); ConfigurationError (or whatever user code raises)
    if it cannot serve."""
    check_config(name, config)
    file = model_file(config, base_dir)
    code = None
    if config.preprocess:
        code = UserPreprocess(
            base_dir / config.preprocess,
            ClearMLModelEndpoint.from_config(name, config),
            model_file=file,
            serving_url=serving_url,
            threads=threads,
        )
    loaded = engines.get(config.engine).load(name, config, code, file, base_dir, unpickle)
    return ConfiguredEndpoint(name, config, triton, code, loaded.onnx, threads, loaded.model)


class ConfiguredEndpoints:
    """The endpoint file's endpoints as an immutable `EndpointSet` (`watcher`), built one entry at a time: an entry
    that fails is left out (and reported in `errors`), the others are served."""

    def __init__(
        self,
        endpoints: dict[str, ConfiguredEndpoint],
        errors: dict[str, str] | None = None,
        metrics: dict[str, EndpointMetrics] | None = None,
        sources: list[Path] | None = None,
        stamps: tuple = (),
    ):
        self.endpoints = endpoints
        self.errors = errors or {}
        self.metrics = metrics or {}
        """Declared custom statistics by endpoint name, for any endpoint (built-in, deployed or configured)."""
        self.sources = sources or []
        """Every preprocess file or folder the endpoint file names (those that failed too): an edit reloads."""
        self.stamps = stamps
        """The sources' stamps taken before they were imported (`EndpointSet.read_stamps`)."""

    @classmethod
    def build(
        cls,
        file: EndpointsFile,
        triton: TritonClient,
        serving_url: str,
        base_dir: Path,
        threads: UserThreads,
        load_timeout: float,
        unpickle: bool = True,
    ) -> ConfiguredEndpoints:
        """Each entry built within `load_timeout` seconds (its code imported, `Preprocess()` and `load()` called,
        its model opened, a pickle only checked unless `unpickle`): one that takes longer is left out and reported,
        the others are served."""
        sources = [base_dir / config.preprocess for config in file.endpoints.values() if config.preprocess]
        stamps = tuple(source_stamp(path) for path in sources)  # before any is read: a later edit is a change
        endpoints, errors = {}, dict(file.invalid)
        for name, config in file.endpoints.items():
            try:
                build = partial(build_endpoint, name, config, triton, serving_url, base_dir, threads, unpickle)
                endpoints[name] = call_within(load_timeout, build, late=_unload)
            except TookTooLong:
                errors[name] = (
                    f"endpoint '{name}' did not load in {load_timeout:g} s (its preprocess import, Preprocess() or "
                    "load(), or its model), the limit GATEWAY_ENDPOINTS_LOAD_TIMEOUT sets: make it load faster or "
                    "raise the limit"
                )
            except BaseException as exc:  # noqa: BLE001 - user code fails in every way (SystemExit too): report, go on
                errors[name] = exc.message if isinstance(exc, ServingError) else describe(exc)
        return cls(endpoints, errors, file.metrics, sources, stamps)

    def get(self, name: str) -> ConfiguredEndpoint | None:
        return self.endpoints.get(name)

    def names(self) -> list[str]:
        return sorted(self.endpoints)

    def source_stamps(self) -> tuple:
        return tuple(source_stamp(path) for path in self.sources)

    def read_stamps(self) -> tuple:
        return self.stamps

    def unload(self) -> None:
        """Call every Preprocess's unload() (the set was replaced, or the worker stops), each given `UNLOAD_TIMEOUT`
        seconds: one that hangs is not waited for."""
        for endpoint in self.endpoints.values():
            _unload(endpoint)


UNLOAD_TIMEOUT = 10.0
"""Seconds one endpoint's unload() is waited for."""


def _unload(endpoint: ConfiguredEndpoint) -> None:
    if endpoint.preprocess_code is None:
        return
    try:
        call_within(UNLOAD_TIMEOUT, endpoint.preprocess_code.unload)
    except TookTooLong:
        log.error("unload() of endpoint '%s' did not return in %g s: not waited for", endpoint.name, UNLOAD_TIMEOUT)
    except BaseException:  # noqa: BLE001 - user code; the others still get their unload()
        log.exception("unload() of endpoint '%s' failed", endpoint.name)


def validate_file(file: EndpointsFile, base_dir: Path, load_timeout: float) -> dict[str, str]:
    """Every problem the gateway would find in `file`, found the same way (preprocess files are imported and
    `load` is called within `load_timeout`, models are opened), without a running Triton and without loading a
    pickled model (its code would run here: the gateway's workers load it)."""
    offline = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)  # never called while building
    unused = UserThreads(1, stuck_after=1.0)  # no request runs: nothing is ever sent to it
    built = ConfiguredEndpoints.build(file, offline, "http://127.0.0.1:1/serve", base_dir, unused, load_timeout, False)
    built.unload()  # every instance that got load() gets its unload()
    return built.errors
