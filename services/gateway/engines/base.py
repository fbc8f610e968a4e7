"""What every engine is: its name, the stage it is timed under, whether it calls the user's `process`, its
write-time check of an endpoint's configuration, what it loads, and its own step between preprocess and
postprocess."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from services.common.errors import ConfigurationError, InvalidInput
from services.gateway.user_errors import describe

if TYPE_CHECKING:
    from services.gateway.configured import ConfiguredEndpoint
    from services.gateway.endpoints import EndpointConfig
    from services.gateway.preprocess import UserPreprocess


@dataclass(frozen=True)
class Loaded:
    """What an engine loaded for one endpoint: an in-process ONNX model, or a model engine's model."""

    onnx: Any = None
    model: Any = None


@dataclass(frozen=True)
class Engine:
    """An engine with no step of its own (the user's `process` is its step). Subclasses override what differs."""

    name: str
    stage: str = "inference"
    """The stage its step is timed under in `serving_stage_duration_seconds`."""
    user_process: Literal["always", "async", "never"] = "always"
    """Whether it calls the user's `process`: always, only an async one (an override of its own step), never."""
    tensors: bool = False
    """Its step sends the declared input tensors to a model (declare `--input`/`--output`)."""
    sends_to_triton: bool = False
    """Its model is a Triton model, which `serving endpoints add` checks against Triton's own metadata."""

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

    def load(
        self,
        name: str,
        config: EndpointConfig,
        code: UserPreprocess | None,
        model_file: str | None,
        base_dir: Path,
        unpickle: bool,
    ) -> Loaded:
        """What the endpoint needs loaded before it serves; ConfigurationError with the fix when it cannot."""
        if self.user_process == "always" and (code is None or not code.has("process")):
            raise ConfigurationError(f"endpoint '{name}' is {self.name} but its Preprocess has no process()")
        return Loaded()

    def runs_code(self, path: str | Path) -> bool:
        """Loading `path` as this engine's model file runs code its author put in it."""
        return False

    async def run(self, endpoint: ConfiguredEndpoint, data: Any) -> Any:
        """Its own step on the preprocess output (only engines that have one are asked)."""
        raise NotImplementedError(f"engine '{self.name}' has no step of its own: the user's process() is its step")


def feeds(endpoint: ConfiguredEndpoint, data: Any) -> dict[str, np.ndarray]:
    """The preprocess output as one array per declared input (one input: the output itself; several: a list or tuple
    of them, in order); InvalidInput naming preprocess when it does not fit."""
    name, specs = endpoint.name, endpoint.config.inputs
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


def outputs(endpoint: ConfiguredEndpoint, found: dict[str, Any]) -> Any:
    """The declared outputs from what the model returned: one array, or a list of them in the declared order."""
    names = [spec.name for spec in endpoint.config.outputs]
    return found[names[0]] if len(names) == 1 else [found[n] for n in names]
