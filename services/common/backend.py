"""What a stack plugs into the shared API.

- An `InferenceBackend` runs encoded tensors through one model version (ONNX Runtime in-process for the FastAPI
  stack; a Triton model version over gRPC for the gateway).
- A `ServedModel` is one model version the data plane can run: its contract (manifest), its own tokenizer, its
  backend.
- Endpoints are what `/serve/{endpoint}` names: each answers a request with its `run(call, predict)`. A
  `ModelEndpoint` holds one or more live versions and picks the one that answers a request (its traffic policy); a
  `PipelineEndpoint` is clearml-serving's preprocess -> engine -> postprocess. Their runs are the data plane's
  (`ModelRun`, `PipelineRun`); an endpoint class inherits one. An `EndpointResolver` finds either by name.

The data plane (`services.api.dataplane`) is built from these and does not know which stack it serves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Protocol

import numpy as np

from services.common.contract import Manifest
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


class Answer(NamedTuple):
    """What an endpoint answers a `/serve` request: the JSON body, and the model name, version and device the
    response headers carry."""

    body: bytes
    model: str
    version: str
    device: str | None = None
    """Where the model ran (`x-device`); None for a pipeline's answer, whose code decides what runs where."""


Read = Callable[[], Awaitable[bytes]]
"""Reads the request's whole body (the limits checked), once."""
Predict = Callable[[ServedModel, list[str], "bool | None"], Awaitable[Any]]
"""The data plane's prediction of texts by a model version (token budget, coalescing): a `Prediction`."""


@dataclass(frozen=True, slots=True)
class ServeCall:
    """One `/serve/{endpoint}[/{version}]` request, as its endpoint's `run` gets it."""

    version: str | None
    """The version the path names, or None: the endpoint's policy chooses."""
    read: Read
    routing_key: str | None
    """The `x-canary-key` header: the same key stays on one version while a canary runs."""
    content_type: str | None
    """How a pipeline gets the body (parsed JSON, or bytes)."""
    declared: Any = None
    """The custom statistics declared for the endpoint (`services.monitoring.statistics.EndpointMetrics`), or None."""


class EndpointKind(Enum):
    """What an endpoint is (set by the run it inherits): the protocols that name a model (OpenAI, Open Inference)
    run only a model endpoint's versions."""

    MODEL = "model"
    """A text model (`ModelEndpoint`): its texts are tokenized and run by the version its policy chose."""
    PIPELINE = "pipeline"
    """User code (`PipelineEndpoint`): the raw body goes through its steps, one after the other."""


class Endpoint(Protocol):
    """What `/serve/{endpoint}` names."""

    kind: EndpointKind
    name: str

    async def run(self, call: ServeCall, predict: Predict) -> Answer:
        """Answer one request; raises ServingError subclasses (an error in user code is the request's error)."""


class ModelEndpoint(Endpoint, Protocol):
    def choose(self, version: str | None, routing_key: str | None) -> ServedModel:
        """`version` if it is live (else NotFound naming the live ones), or the one the traffic policy picks;
        the same `routing_key` picks the same version while the policy stays the same."""

    def versions(self) -> list[str]:
        """The live versions."""


Collect = Callable[[dict | None], None]
"""clearml-serving's `collect_custom_statistics_fn`: a step reports values of the request's declared variables."""


class PipelineEndpoint(Endpoint, Protocol):
    """An endpoint declared in configuration (clearml-serving's preprocess -> engine -> postprocess). Each step gets
    the previous one's result, the request's own `state` dict and its `collect`; each raises ServingError
    subclasses (an error in user code is the request's error, never the worker's)."""

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

    def resolve(self, name: str) -> ModelEndpoint | PipelineEndpoint | None:
        """The endpoint served as `name` (its own `name` is that name: its metrics and logs carry it), or None."""

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
