"""The `triton` engine: the preprocess output, as the declared input tensors, to a Triton model over gRPC; an
`async def process` of the user's replaces that call (clearml-serving's Triton engine awaits one when the class has
it; its template's sync pass-through is not called)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from services.common.errors import ConfigurationError
from services.gateway.endpoints import EndpointConfig
from services.gateway.engine_names import EngineName
from services.gateway.engines.base import Engine, Loading, Step, feeds, outputs


@dataclass(frozen=True)
class TritonEngine(Engine):
    name: EngineName = "triton"
    summary: str = "the declared tensors to a Triton model over gRPC; an `async def process` replaces it"
    stage: str = "triton"
    user_process: Literal["always", "async", "never"] = "async"
    tensors: bool = True

    def check(self, name: str, config: EndpointConfig) -> None:
        super().check(name, config)
        if not config.model:
            raise ConfigurationError(
                f"endpoint '{name}': field 'model' is empty: name the Triton model (`--model NAME`)"
            )

    def load(self, loading: Loading) -> Step:
        name, config, triton = loading.name, loading.config, loading.triton
        model, version = config.model or "", config.model_version
        names = [spec.name for spec in config.outputs]

        async def step(data: Any) -> Any:
            return outputs(config, await triton.infer(model, feeds(name, config, data), names, version=version))

        return step
