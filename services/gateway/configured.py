"""Configured endpoints, of every engine the endpoint file declares (`engines`): clearml-serving's preprocess ->
engine -> postprocess. Each endpoint is a `PipelineEndpoint`, whose run calls its steps and times them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from services.api.endpoint import Endpoints, PipelineEndpoint
from services.common.backend import Collect
from services.common.errors import InvalidInput, NotFound, ServingError
from services.common.names import shown
from services.gateway import engines
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.preprocess import ClearMLModelEndpoint, UserPreprocess
from services.gateway.user_errors import describe, not_users
from services.gateway.user_threads import TookTooLong, UserThreads, call_within
from services.triton.grpc_client import TritonClient

log = logging.getLogger(__name__)


@dataclass
class ConfiguredEndpoint(PipelineEndpoint):
    name: str
    config: EndpointConfig
    preprocess_code: UserPreprocess | None
    step: engines.Step | None
    """Its engine's own step, closed over what the engine loaded for it; None: the user's `process` is its step."""
    engine: engines.Engine = field(init=False)
    version: str = field(init=False)
    stage: str = field(init=False)

    def __post_init__(self) -> None:
        self.engine = engines.get(self.config.engine)
        self.version = self.config.version or "1"
        self.stage = self.engine.stage

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
        if self._calls_user_process() or self.step is None:
            return await self._user_step("process", data, state, collect)
        return await self.step(data)

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

    def unload(self) -> None:
        """Its Preprocess's unload(), given `UNLOAD_TIMEOUT` seconds: one that hangs is not waited for."""
        if self.preprocess_code is None:
            return
        try:
            call_within(UNLOAD_TIMEOUT, self.preprocess_code.unload)
        except TookTooLong:
            log.error("unload() of endpoint '%s' did not return in %g s: not waited for", self.name, UNLOAD_TIMEOUT)
        except BaseException:  # noqa: BLE001 - user code; the others still get their unload()
            log.exception("unload() of endpoint '%s' failed", self.name)


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
    step = engines.get(config.engine).load(
        engines.Loading(name, config, code, file, base_dir, unpickle, triton, threads)
    )
    return ConfiguredEndpoint(name, config, code, step)


def build_configured(
    file: EndpointsFile,
    triton: TritonClient,
    serving_url: str,
    base_dir: Path,
    threads: UserThreads,
    load_timeout: float,
    unpickle: bool = True,
) -> Endpoints:
    """The endpoint file's endpoints, built one entry at a time, each within `load_timeout` seconds (its code
    imported, `Preprocess()` and `load()` called, its model opened, a pickle only checked unless `unpickle`): an
    entry that fails or takes longer is left out and reported in `errors`, the others are served."""
    endpoints, errors = {}, dict(file.invalid)
    for name, config in file.endpoints.items():
        try:
            build = partial(build_endpoint, name, config, triton, serving_url, base_dir, threads, unpickle)
            endpoints[name] = call_within(load_timeout, build, late=ConfiguredEndpoint.unload)
        except TookTooLong:
            errors[name] = (
                f"endpoint '{name}' did not load in {load_timeout:g} s (its preprocess import, Preprocess() or "
                "load(), or its model), the limit GATEWAY_ENDPOINTS_LOAD_TIMEOUT sets: make it load faster or "
                "raise the limit"
            )
        except BaseException as exc:  # noqa: BLE001 - user code fails in every way (SystemExit too): report, go on
            errors[name] = exc.message if isinstance(exc, ServingError) else describe(exc)
    return Endpoints(endpoints, errors, file.metrics)


UNLOAD_TIMEOUT = 10.0
"""Seconds one endpoint's unload() is waited for."""


def validate_file(file: EndpointsFile, base_dir: Path, load_timeout: float) -> dict[str, str]:
    """Every problem the gateway would find in `file`, found the same way (preprocess files are imported and
    `load` is called within `load_timeout`, models are opened), without a running Triton and without loading a
    pickled model (its code would run here: the gateway's workers load it)."""
    offline = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)  # never called while building
    unused = UserThreads(1, stuck_after=1.0)  # no request runs: nothing is ever sent to it
    built = build_configured(file, offline, "http://127.0.0.1:1/serve", base_dir, unused, load_timeout, False)
    built.unload()  # every instance that got load() gets its unload()
    return dict(built.errors)
