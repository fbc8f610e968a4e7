"""The gateway's inference backend: tensors from the worker's tokenizer go to Triton's encoder over gRPC."""

from __future__ import annotations

import numpy as np

from services.common.contract import Manifest
from services.common.tokenization import EncodedBatch
from services.gateway.settings import GatewaySettings
from services.gateway.triton_client import TritonClient


class TritonBackend:
    stage = "triton"

    def __init__(self, settings: GatewaySettings, manifest: Manifest, triton: TritonClient):
        self.settings = settings
        self.manifest = manifest
        self.triton = triton

    async def start(self) -> None:
        """Nothing to load: readiness follows Triton (`ready`), so the gateway may start before Triton."""

    async def stop(self) -> None:
        await self.triton.close()

    async def ready(self) -> bool:
        return await self.triton.model_ready(self.settings.triton_model)

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        outputs = await self.triton.infer(
            self.settings.triton_model, batch.tensors(self.manifest.input_names), [self.manifest.output.name]
        )
        return outputs[self.manifest.output.name]
