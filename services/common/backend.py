"""What a stack plugs into the shared API: an inference backend and, optionally, configured endpoints.

The FastAPI stack runs ONNX Runtime in-process; the gateway sends the tensors to Triton over gRPC and adds
clearml-serving style configured endpoints. The data plane (`services.api.dataplane`) is built from these and does
not know which stack it serves.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from services.common.tokenization import EncodedBatch


class InferenceBackend(Protocol):
    stage: str
    """Name of the stage its `infer` is timed under in `serving_stage_duration_seconds` (`inference`, `triton`)."""

    async def start(self) -> None:
        """Connect or load; raise a ServingError if the backend cannot serve."""

    async def stop(self) -> None: ...

    async def ready(self) -> bool:
        """Whether a request sent now would be served."""

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        """The contract output for each row of the batch; raises ServingError subclasses."""


class Endpoint(Protocol):
    """An endpoint declared in configuration (clearml-serving's preprocess -> engine -> postprocess)."""

    version: str

    async def serve(self, version: str | None, body: Any) -> Any:
        """The JSON-able response to `body`; raises ServingError subclasses."""


class EndpointResolver(Protocol):
    """Finds the configured endpoint of a name; the built-in endpoint answers names it does not know."""

    def resolve(self, name: str) -> Endpoint | None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class NoConfiguredEndpoints:
    """The FastAPI baseline: only the built-in endpoint."""

    def resolve(self, name: str) -> None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
