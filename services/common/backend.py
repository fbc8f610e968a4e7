"""What a stack plugs into the shared API.

- An `InferenceBackend` runs encoded tensors through one model version (ONNX Runtime in-process for the FastAPI
  stack; a Triton model version over gRPC for the gateway).
- A `ServedModel` is one model version the data plane can run: its contract (manifest), its own tokenizer, its
  backend.
- Endpoints are what `/serve/{endpoint}` names, each of a declared `kind`. A `ModelEndpoint` holds one or more live
  versions and picks the one that answers a request (its traffic policy); a `PipelineEndpoint` is clearml-serving's
  preprocess -> engine -> postprocess, each step called by the data plane. An `EndpointResolver` finds either by
  name.

The data plane (`services.api.dataplane`) is built from these and does not know which stack it serves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import numpy as np

from services.common.contract import Manifest
from services.common.errors import NotFound
from services.common.tokenization import EncodedBatch, TextTokenizer


class InferenceBackend(Protocol):
    stage: str
    """Name of the stage its `infer` is timed under in `serving_stage_duration_seconds` (`inference`, `triton`)."""
    device: str
    """Where its model runs, as the `x-device` header of its answers says: `cpu`, `gpu` or `sim` (the simulated
    accelerator); `unknown` until the backend has found out."""

    async def start(self) -> None:
        """Connect or load; raise a ServingError if the backend cannot serve."""

    async def stop(self) -> None: ...

    async def ready(self) -> bool:
        """Whether a request sent now would be served."""

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        """The contract output for each row of the batch; raises ServingError subclasses."""


@dataclass(frozen=True)
class ServedModel:
    endpoint: str
    version: str
    manifest: Manifest
    tokenizer: TextTokenizer
    backend: InferenceBackend
    run_id: str | None = None
    """The registry run that produced this version (deployed versions), for logs and lineage."""


class EndpointKind(Enum):
    """How the data plane runs an endpoint (an attribute of each endpoint class: no guessing from its methods)."""

    MODEL = "model"
    """A text model (`ModelEndpoint`): the data plane tokenizes the texts and runs the version the policy chose."""
    PIPELINE = "pipeline"
    """User code (`PipelineEndpoint`): the data plane hands the raw body to its steps, one after the other."""


class ModelEndpoint(Protocol):
    kind: EndpointKind  # EndpointKind.MODEL
    name: str

    def choose(self, version: str | None, routing_key: str | None) -> ServedModel:
        """`version` if it is live (else NotFound naming the live ones), or the one the traffic policy picks;
        the same `routing_key` picks the same version while the policy stays the same."""

    def versions(self) -> list[str]:
        """The live versions."""


Collect = Callable[[dict | None], None]
"""clearml-serving's `collect_custom_statistics_fn`: a step reports values of the request's declared variables."""


class PipelineEndpoint(Protocol):
    """An endpoint declared in configuration (clearml-serving's preprocess -> engine -> postprocess). Each step gets
    the previous one's result, the request's own `state` dict and its `collect`; each raises ServingError
    subclasses (an error in user code is the request's error, never the worker's)."""

    kind: EndpointKind  # EndpointKind.PIPELINE
    version: str
    stage: str
    """Name of the stage `process` is timed under (`triton`, `inference`), as `InferenceBackend.stage`."""

    def accept(self, version: str | None) -> None:
        """Raise NotFound unless `version` (from `/serve/{endpoint}/{version}`) is one this endpoint answers."""

    async def preprocess(self, body: Any, state: dict, collect: Collect) -> Any: ...

    async def process(self, data: Any, state: dict, collect: Collect) -> Any:
        """The engine: the user's `process`, or the declared tensors through Triton or ONNX Runtime."""

    async def postprocess(self, data: Any, state: dict, collect: Collect) -> Any:
        """The JSON-able response."""


class EndpointResolver(Protocol):
    """Finds the endpoint of a name beyond the stack's built-in one."""

    def resolve(self, name: str) -> ModelEndpoint | PipelineEndpoint | None: ...

    def names(self) -> list[str]:
        """Every endpoint it serves now (for 404 messages)."""

    def errors(self) -> dict[str, str]:
        """Configuration problems: what is not served, and why (for readiness and status output)."""

    def health(self) -> dict[str, str]:
        """What `/health/ready` adds about the sources it follows (the deployment state store's reachability)."""

    def declared(self, name: str) -> Any:
        """The custom statistics declared for endpoint `name` (`services.monitoring.statistics.EndpointMetrics`)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class NoConfiguredEndpoints:
    """The FastAPI baseline: only the built-in endpoint."""

    def resolve(self, name: str) -> None:
        return None

    def names(self) -> list[str]:
        return []

    def errors(self) -> dict[str, str]:
        return {}

    def health(self) -> dict[str, str]:
        return {}

    def declared(self, name: str) -> None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


class SingleModelEndpoint:
    """An endpoint with one version: the stack's built-in model."""

    kind = EndpointKind.MODEL

    def __init__(self, model: ServedModel):
        self.name = model.endpoint
        self.model = model

    def choose(self, version: str | None, routing_key: str | None) -> ServedModel:
        if version is not None and version != self.model.version:
            raise NotFound(f"endpoint '{self.name}' has no version '{version}'; available: '{self.model.version}'")
        return self.model

    def versions(self) -> list[str]:
        return [self.model.version]
