"""The `triton` engine: the preprocess output, as the declared input tensors, to a Triton model over gRPC; an
`async def process` of the user's replaces that call (clearml-serving's Triton engine awaits one when the class has
it; its template's sync pass-through is not called)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from services.common.errors import ConfigurationError
from services.gateway.engines.base import Engine, feeds, outputs

if TYPE_CHECKING:
    from services.gateway.configured import ConfiguredEndpoint
    from services.gateway.endpoints import EndpointConfig


@dataclass(frozen=True)
class TritonEngine(Engine):
    name: str = "triton"
    stage: str = "triton"
    user_process: str = "async"
    tensors: bool = True
    sends_to_triton: bool = True

    def check(self, name: str, config: EndpointConfig) -> None:
        super().check(name, config)
        if not config.model:
            raise ConfigurationError(
                f"endpoint '{name}': field 'model' is empty: name the Triton model (`--model NAME`)"
            )

    async def run(self, endpoint: ConfiguredEndpoint, data: Any) -> Any:
        config = endpoint.config
        names = [spec.name for spec in config.outputs]
        found = await endpoint.triton.infer(config.model, feeds(endpoint, data), names, version=config.model_version)
        return outputs(endpoint, found)
