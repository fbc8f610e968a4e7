"""The `onnxruntime` engine (this project's own): the preprocess output, as the declared input tensors, through an
exported model directory in-process (on a thread: the event loop serves on); an `async def process` of the user's
replaces that call, as with `triton`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.common.errors import ConfigurationError
from services.gateway.engines.base import Engine, Loaded, feeds, outputs

if TYPE_CHECKING:
    from services.gateway.configured import ConfiguredEndpoint
    from services.gateway.endpoints import EndpointConfig
    from services.gateway.preprocess import UserPreprocess


@dataclass(frozen=True)
class OnnxRuntimeEngine(Engine):
    name: str = "onnxruntime"
    user_process: str = "async"
    tensors: bool = True

    def check(self, name: str, config: EndpointConfig) -> None:
        super().check(name, config)
        if not config.model:
            raise ConfigurationError(
                f"endpoint '{name}': field 'model' is empty: give the exported model directory (`--model DIR`)"
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
        from services.common.contract import Manifest
        from services.common.onnx_runner import OnnxModel

        model_dir = base_dir / (config.model or "")
        return Loaded(onnx=OnnxModel(model_dir, Manifest.load(model_dir)))

    async def run(self, endpoint: ConfiguredEndpoint, data: Any) -> Any:
        name = endpoint.config.outputs[0].name
        return outputs(endpoint, {name: await asyncio.to_thread(endpoint.onnx.run, feeds(endpoint, data))})
