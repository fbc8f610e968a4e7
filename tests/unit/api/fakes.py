"""Small in-process stand-ins for what a stack plugs into the data plane: the unit tier runs no server and no model
(the real backends, ONNX Runtime in-process and Triton over gRPC, are exercised in tests/integration)."""

from __future__ import annotations

import numpy as np

from services.api.catalog import Catalog
from services.api.dataplane import DataPlane
from services.api.endpoint import Endpoint, Endpoints, EndpointSource, PipelineEndpoint, SingleModelEndpoint
from services.common.backend import ServedModel
from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.errors import NotFound
from services.common.settings import ApiSettings
from services.common.tokenization import EncodedBatch, TextTokenizer
from services.monitoring.statistics import EndpointMetrics, Variable
from tests.support.models import unit_model_dir


class CountingBackend:
    """Answers each row with its token count, so a test can tell which text produced which row."""

    stage = "unit-backend"
    device = "cpu"

    def __init__(self):
        self.calls = 0
        self.shapes: list[tuple[int, int]] = []

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def ready(self) -> bool:
        return True

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        self.calls += 1
        self.shapes.append(batch.shape)
        return np.array(batch.token_counts, dtype=np.float32)[:, None]


class Pipeline(PipelineEndpoint):
    """A pipeline endpoint that records the steps its run called, with the state they shared."""

    name = "custom"
    version = "7"
    stage = "unit-engine"

    def __init__(self):
        self.steps: list[str] = []

    def accept(self, version):
        if version not in (None, "7"):
            raise NotFound(f"no version '{version}'")

    async def preprocess(self, body, state, collect):
        self.steps.append("preprocess")
        state["seen"] = body
        collect({"lang": "en", "stray": 1})
        return body["x"]

    async def process(self, data, state, collect):
        self.steps.append("process")
        return [v * 2 for v in data]

    async def postprocess(self, data, state, collect):
        self.steps.append("postprocess")
        return {"y": data, "state": state["seen"]}


class Fixed(EndpointSource):
    """A source whose endpoints change only when a test says so."""

    def __init__(self, endpoints: Endpoints):
        self.endpoints = endpoints

    def current(self) -> Endpoints:
        return self.endpoints


def endpoints(model: ServedModel) -> Endpoints:
    """The built-in model's files under a second endpoint name, 'other' (version 3), and a pipeline, 'custom', with
    statistics declared for it; 'coming' has a version being loaded (4) and none served yet."""
    other = SingleModelEndpoint(ServedModel("other", "3", model.manifest, model.tokenizer, model.backend))
    declared = {"custom": EndpointMetrics(variables={"lang": Variable(kind="enum", values=["en"])})}
    return Endpoints({"custom": Pipeline(), "other": other}, declared=declared, loading={"coming": ("4",)})


def serve_also(catalog: Catalog, *added: Endpoint, **declared: EndpointMetrics) -> None:
    """The catalog's (one, fixed) source with `added` endpoints in place of those of their names, and `declared`
    statistics added."""
    (source,) = catalog.sources
    assert isinstance(source, Fixed)
    now = source.endpoints
    by_name = dict(now.by_name) | {endpoint.name: endpoint for endpoint in added}
    source.endpoints = Endpoints(by_name, now.errors, dict(now.declared) | declared, now.loading)


def make_dataplane(tmp_path, **settings) -> DataPlane:
    """A data plane with the built-in model 'minilm' (version 1) on a CountingBackend, and `endpoints`' as one
    fixed source."""
    model_dir = unit_model_dir(tmp_path / "m")
    manifest = Manifest.load(model_dir)
    settings = ApiSettings(model_dir=model_dir, max_inflight=2, max_texts=3, **settings)
    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    builtin = ServedModel("minilm", "1", manifest, tokenizer, CountingBackend())
    return DataPlane(settings, builtin, builtin.backend, [Fixed(endpoints(builtin))])
