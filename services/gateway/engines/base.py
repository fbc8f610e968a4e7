"""What every engine is: its name and one-line summary, the stage it is timed under, whether it calls the user's
`process`, its write-time check of an endpoint's configuration, and `load`, which gives the endpoint's own step: a
function that closes over what the engine loaded for it (its Triton client and tensor names, its ONNX session, its
model). The engine itself holds nothing of any endpoint."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from services.common.errors import ConfigurationError, InvalidInput
from services.gateway.endpoints import EndpointConfig
from services.gateway.engine_names import SENDS_TO_TRITON, EngineName
from services.gateway.preprocess import UserPreprocess
from services.gateway.user_errors import describe
from services.gateway.user_threads import UserThreads
from services.triton.grpc_client import TritonClient

Step = Callable[[Any], Awaitable[Any]]
"""An endpoint's own step between preprocess and postprocess: the preprocess output in, the model's output out."""


@dataclass(frozen=True)
class Loading:
    """What loading one endpoint has to hand: its entry, the user's code, and the worker's shared parts."""

    name: str
    config: EndpointConfig
    code: UserPreprocess | None
    """The user's Preprocess, imported and its load() called; None when the entry names none."""
    model_file: str | None
    """The model file as `load()` and the model engines get it (`configured.model_file`)."""
    base_dir: Path
    """The endpoint file's folder: relative paths of the entry are relative to it."""
    unpickle: bool
    """Whether a pickled model file is loaded (the gateway's workers) or only checked (`serving endpoints add`)."""
    triton: TritonClient
    threads: UserThreads
    """The worker's threads for blocking calls (a model's predict): the event loop serves on."""


@dataclass(frozen=True)
class Engine:
    """An engine with no step of its own (the user's `process` is its step). Subclasses override what differs."""

    name: EngineName
    summary: str
    """Its step in one line, as `serving endpoints add --help` and the documentation's table of engines say it."""
    stage: str = "inference"
    """The stage its step is timed under in `serving_stage_duration_seconds`."""
    user_process: Literal["always", "async", "never"] = "always"
    """Whether it calls the user's `process`: always, only an async one (an override of its own step), never."""
    tensors: bool = False
    """Its step sends the declared input tensors to a model (declare `--input`/`--output`)."""

    @property
    def sends_to_triton(self) -> bool:
        """Its model is a Triton model, which `serving endpoints add` checks against Triton's own metadata."""
        return self.name in SENDS_TO_TRITON

    def missing(self) -> str | None:
        """Why it cannot run in this environment (its library is not installed), with the fix; None when it can."""
        return None

    def check(self, name: str, config: EndpointConfig) -> None:
        """What the configuration must say for this engine, with the fix (ConfigurationError)."""
        if problem := self.missing():
            raise ConfigurationError(f"endpoint '{name}': {problem}")
        if self.tensors and not config.outputs:
            raise ConfigurationError(
                f"endpoint '{name}': field 'outputs' is empty: declare the model's outputs "
                "(`--output NAME:DTYPE:SHAPE`, e.g. --output embedding:FP32:-1,384)"
            )
        if self.user_process == "always" and not config.preprocess:
            raise ConfigurationError(
                f"endpoint '{name}': engine '{self.name}' needs field 'preprocess': a file whose class Preprocess "
                "has process() (`--preprocess FILE`)"
            )

    def load(self, loading: Loading) -> Step | None:
        """What the endpoint needs loaded before it serves, as its own step; None when the user's `process` is its
        step. ConfigurationError with the fix when it cannot load."""
        code = loading.code
        if self.user_process == "always" and (code is None or not code.has("process")):
            raise ConfigurationError(f"endpoint '{loading.name}' is {self.name} but its Preprocess has no process()")
        return None

    def runs_code(self, path: str | Path) -> bool:
        """Loading `path` as this engine's model file runs code its author put in it."""
        return False


def feeds(name: str, config: EndpointConfig, data: Any) -> dict[str, np.ndarray]:
    """The preprocess output as one array per declared input (one input: the output itself; several: a list or tuple
    of them, in order); InvalidInput naming preprocess when it does not fit."""
    specs = config.inputs
    if len(specs) > 1 and not isinstance(data, list | tuple):
        raise InvalidInput(
            f"preprocess of endpoint '{name}' returned a {type(data).__name__}; the endpoint declares "
            f"{len(specs)} inputs ({', '.join(s.name for s in specs)}): return a list of {len(specs)} arrays",
            param="preprocess",
        )
    arrays = [data] if len(specs) == 1 else list(data)
    if len(arrays) != len(specs):
        raise InvalidInput(
            f"preprocess returned {len(arrays)} inputs; endpoint '{name}' declares {len(specs)} "
            f"({', '.join(s.name for s in specs)}), in that order",
            param="preprocess",
        )
    try:
        return {spec.name: np.asarray(array, dtype=spec.numpy_dtype) for spec, array in zip(specs, arrays, strict=True)}
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInput(
            f"preprocess output does not fit the declared inputs of endpoint '{name}' "
            f"({', '.join(f'{s.name} {s.dtype}' for s in specs)}): {describe(exc)}",
            param="preprocess",
        ) from None


def outputs(config: EndpointConfig, found: dict[str, Any]) -> Any:
    """The declared outputs from what the model returned: one array, or a list of them in the declared order."""
    names = [spec.name for spec in config.outputs]
    return found[names[0]] if len(names) == 1 else [found[n] for n in names]
