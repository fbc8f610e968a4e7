"""The data plane's own logic: admission, limits, which endpoint answers, which stages are timed.

The backends here are small in-process classes written for the test: the unit tier runs no server and no model
(the real backends, ONNX Runtime in-process and Triton over gRPC, are exercised in tests/integration).
"""

import asyncio
import gc
import weakref

import numpy as np
import pytest
from prometheus_client import REGISTRY

from services.api.dataplane import DataPlane
from services.common.backend import ServedModel, SingleModelEndpoint
from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.errors import NotFound, PayloadTooLarge
from services.common.settings import ApiSettings
from services.common.tokenization import EncodedBatch, TextTokenizer
from tests.support.models import unit_model_dir


class CountingBackend:
    """Answers each row with its token count, so a test can tell which text produced which row."""

    stage = "unit-backend"

    def __init__(self):
        self.calls = 0

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def ready(self) -> bool:
        return True

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        self.calls += 1
        return np.array(batch.token_counts, dtype=np.float32)[:, None]


class OneEndpoint:
    version = "7"

    async def serve(self, version, body):
        return {"echo": body}


class Resolver:
    def __init__(self, model):
        self.versioned = SingleModelEndpoint(ServedModel("other", "3", model.manifest, model.tokenizer, model.backend))

    def resolve(self, name):
        return {"custom": OneEndpoint(), "other": self.versioned}.get(name)

    def names(self):
        return ["custom", "other"]

    async def start(self): ...

    async def stop(self): ...


@pytest.fixture
def dataplane(tmp_path):
    model_dir = unit_model_dir(tmp_path / "m")
    manifest = Manifest.load(model_dir)
    settings = ApiSettings(model_dir=model_dir, max_inflight=2, max_texts=3)
    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    builtin = ServedModel("minilm", "1", manifest, tokenizer, CountingBackend())
    return DataPlane(settings, builtin, builtin.backend, Resolver(builtin))


def stage_count(stage: str) -> float:
    return REGISTRY.get_sample_value("serving_stage_duration_seconds_count", {"stage": stage}) or 0.0


def test_predict_keeps_rows_in_request_order_and_times_the_backend_stage(dataplane):
    before = stage_count("unit-backend")
    model = dataplane.model_for("minilm")
    prediction = asyncio.run(dataplane.predict(model, ["hello", "hello world the quick brown fox", "cat"]))
    assert prediction.outputs[:, 0].tolist() == [3, 8, 3] == prediction.token_counts
    assert stage_count("unit-backend") == before + 1, "the backend names its own stage"


def test_coalesced_requests_are_counted_per_request_and_their_texts_per_text(dataplane):
    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name, {"endpoint": "minilm", "version": "1"}) or 0.0

    dataplane.settings.coalesce = True
    model = dataplane.model_for("minilm")
    before = {n: sample(n) for n in ("serving_endpoint_texts_per_request_count", "serving_endpoint_texts_total")}
    sizes = [1, 2, 3, 1, 2, 3, 1, 2]

    async def run():
        return await asyncio.gather(*(dataplane.predict(model, ["a b"] * n) for n in sizes))

    asyncio.run(run())
    assert dataplane.backend.calls < len(sizes), "the requests were coalesced"
    assert sample("serving_endpoint_texts_per_request_count") == before["serving_endpoint_texts_per_request_count"] + 8
    assert sample("serving_endpoint_texts_total") == before["serving_endpoint_texts_total"] + sum(sizes)


def test_a_retired_version_is_freed_with_its_coalescer(dataplane):
    dataplane.settings.coalesce = True
    manifest = dataplane.builtin.model.manifest
    tokenizer = TextTokenizer(dataplane.settings.model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    retired = ServedModel("other", "2", manifest, tokenizer, CountingBackend())
    prediction = asyncio.run(dataplane.predict(retired, ["hello", "cat"]))
    assert prediction.outputs[:, 0].tolist() == [3, 3]
    model_ref, tokenizer_ref = weakref.ref(retired), weakref.ref(tokenizer)
    del retired, tokenizer
    gc.collect()
    assert model_ref() is None and tokenizer_ref() is None, "nothing keeps a retired version alive"
    assert asyncio.run(dataplane.predict(dataplane.builtin.model, ["cat"])).token_counts == [3]


def test_more_texts_than_the_limit_is_413(dataplane):
    with pytest.raises(PayloadTooLarge, match="the limit is 3"):
        asyncio.run(dataplane.predict(dataplane.model_for("minilm"), ["a"] * 4))
    assert dataplane.backend.calls == 0


def test_endpoints_resolve_to_the_builtin_model_then_the_resolvers(dataplane):
    assert dataplane.resolve("custom").version == "7"
    assert dataplane.model_for("minilm", "1").endpoint == "minilm"
    assert dataplane.model_for("other").version == "3"
    with pytest.raises(NotFound, match="this server serves 'minilm', 'custom', 'other'"):
        dataplane.resolve("nope")
    with pytest.raises(NotFound, match="available: '1'"):
        dataplane.model_for("minilm", "2")
    with pytest.raises(NotFound, match="runs preprocess code"):
        dataplane.model_for("custom")


def test_a_model_name_is_the_builtin_model_or_an_endpoint(dataplane):
    assert dataplane.model_named(None).endpoint == "minilm"
    assert dataplane.model_named("unit-embedding").endpoint == "minilm"
    assert dataplane.model_named("other").version == "3"
    with pytest.raises(NotFound, match="no model 'gpt'"):
        dataplane.model_named("gpt")


def test_readiness_waits_for_a_warm_up_that_succeeds(dataplane):
    assert not dataplane.ready
    assert asyncio.run(dataplane.is_ready())
    assert dataplane.backend.calls == 3, "three warm-up predictions"
