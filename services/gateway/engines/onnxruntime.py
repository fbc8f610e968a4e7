"""The `onnxruntime` engine (this project's own): the preprocess output, as the declared input tensors, through an
exported model directory in-process (on a thread: the event loop serves on); an `async def process` of the user's
replaces that call, as with `triton`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from services.common.errors import ConfigurationError
from services.gateway.endpoints import EndpointConfig
from services.gateway.engine_names import EngineName
from services.gateway.engines.base import Engine, Loading, Step, feeds, outputs


class Session(Protocol):
    """What the step runs: an exported model (`services.common.onnx_runner.OnnxModel`)."""

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray: ...


@dataclass(frozen=True)
class OnnxRuntimeEngine(Engine):
    name: EngineName = "onnxruntime"
    summary: str = "the declared tensors through an exported model in-process (this project's own engine)"
    user_process: Literal["always", "async", "never"] = "async"
    tensors: bool = True

    def check(self, name: str, config: EndpointConfig) -> None:
        super().check(name, config)
        if not config.model:
            raise ConfigurationError(
                f"endpoint '{name}': field 'model' is empty: give the exported model directory (`--model DIR`)"
            )

    def load(self, loading: Loading) -> Step:
        from services.common.contract import Manifest
        from services.common.onnx_runner import OnnxModel

        model_dir = loading.base_dir / (loading.config.model or "")
        return self.step(loading, OnnxModel(model_dir, Manifest.load(model_dir)))

    def step(self, loading: Loading, session: Session) -> Step:
        """The step through `session`."""
        name, config = loading.name, loading.config
        output = config.outputs[0].name

        async def step(data: Any) -> Any:
            return outputs(config, {output: await asyncio.to_thread(session.run, feeds(name, config, data))})

        return step
