"""The data plane's own logic: limits, coalescing, readiness, and what its two entries do with a request: `serve`
hands it to the endpoint's `run` (a model's or a pipeline's), `infer` runs a model for another protocol; each
stage timed once, the endpoint's requests counted and its statistics recorded."""

import asyncio
import gc
import weakref

import orjson
import pytest
from prometheus_client import REGISTRY

from observability.logging import model_var
from services.api.endpoint import Endpoint, ModelEndpoint, PipelineEndpoint
from services.common.backend import Answer, ServeCall, ServedModel
from services.common.contract import TOKENIZER_FILE
from services.common.errors import BadRequest, NotFound, PayloadTooLarge
from services.common.tokenization import TextTokenizer
from tests.unit.api.fakes import CountingBackend, Pipeline, make_dataplane, serve_also


@pytest.fixture
def dataplane(tmp_path):
    return make_dataplane(tmp_path)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def stage_counts(*stages: str) -> list[float]:
    return [sample("serving_stage_duration_seconds_count", stage=stage) for stage in stages]


def body(data: dict):
    async def read() -> bytes:
        return orjson.dumps(data)

    return read


def test_predict_keeps_rows_in_request_order_and_times_the_backend_stage(dataplane):
    before = stage_counts("unit-backend")[0]
    model = dataplane.catalog.model_for("minilm")
    prediction = asyncio.run(dataplane.predict(model, ["hello", "hello world the quick brown fox", "cat"]))
    assert prediction.outputs[:, 0].tolist() == [3, 8, 3] == prediction.token_counts
    assert stage_counts("unit-backend")[0] == before + 1, "the backend names its own stage"


def test_coalesced_requests_are_counted_per_request_and_their_texts_per_text(dataplane):
    names = ("serving_endpoint_texts_per_request_count", "serving_endpoint_texts_total")
    dataplane.settings.coalesce = True
    model = dataplane.catalog.model_for("minilm")
    before = {n: sample(n, endpoint="minilm", version="1") for n in names}
    sizes = [1, 2, 3, 1, 2, 3, 1, 2]

    async def run():
        return await asyncio.gather(*(dataplane.predict(model, ["a b"] * n) for n in sizes))

    asyncio.run(run())
    assert dataplane.backend.calls < len(sizes), "the requests were coalesced"
    assert sample(names[0], endpoint="minilm", version="1") == before[names[0]] + 8
    assert sample(names[1], endpoint="minilm", version="1") == before[names[1]] + sum(sizes)


def test_a_retired_version_is_freed_with_its_coalescer(dataplane):
    dataplane.settings.coalesce = True
    manifest = dataplane.catalog.builtin.model.manifest
    tokenizer = TextTokenizer(dataplane.settings.model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    retired = ServedModel("other", "2", manifest, tokenizer, CountingBackend())
    prediction = asyncio.run(dataplane.predict(retired, ["hello", "cat"]))
    assert prediction.outputs[:, 0].tolist() == [3, 3]
    model_ref, tokenizer_ref = weakref.ref(retired), weakref.ref(tokenizer)
    del retired, tokenizer
    gc.collect()
    assert model_ref() is None and tokenizer_ref() is None, "nothing keeps a retired version alive"
    assert asyncio.run(dataplane.predict(dataplane.catalog.builtin.model, ["cat"])).token_counts == [3]


def test_more_texts_than_the_limit_is_413(dataplane):
    with pytest.raises(PayloadTooLarge, match="the limit is 3"):
        asyncio.run(dataplane.predict(dataplane.catalog.model_for("minilm"), ["a"] * 4))
    assert dataplane.backend.calls == 0


def test_readiness_waits_for_a_warm_up_that_succeeds(dataplane):
    assert not dataplane.ready
    assert asyncio.run(dataplane.is_ready())
    assert dataplane.backend.calls == 3, "three warm-up predictions"


@pytest.mark.parametrize("coalesce", [False, True])
def test_serve_runs_the_chosen_version_timing_each_stage_once_and_counting_the_request(dataplane, coalesce):
    dataplane.settings.coalesce = coalesce
    stages = ("parse", "preprocess", "unit-backend", "postprocess")
    before, requests = stage_counts(*stages), "serving_endpoint_requests_total"
    counted = sample(requests, endpoint="other", version="3", code="200")
    answer = asyncio.run(dataplane.serve("other", None, body({"texts": ["hello", "cat"]}), None, None))
    assert (answer.model, answer.version) == ("unit-embedding", "3")
    assert orjson.loads(answer.body)["tokens"] == [3, 3]
    assert stage_counts(*stages) == [count + 1 for count in before]
    assert sample(requests, endpoint="other", version="3", code="200") == counted + 1


def test_a_bad_body_is_counted_under_its_endpoint_and_an_unknown_version_is_not(dataplane):
    requests = "serving_endpoint_requests_total"
    bad = sample(requests, endpoint="minilm", version="1", code="400")

    async def raw() -> bytes:
        return b"{ not json"

    with pytest.raises(BadRequest):
        asyncio.run(dataplane.serve("minilm", None, raw, None, None))
    assert sample(requests, endpoint="minilm", version="1", code="400") == bad + 1
    with pytest.raises(NotFound, match="available: '1'"):
        asyncio.run(dataplane.serve("minilm", "9", body({"text": "x"}), None, None))
    assert sample(requests, endpoint="minilm", version="9", code="404") == 0, "no series for a version not served"


def test_serve_runs_a_pipeline_step_by_step_and_records_its_statistics(dataplane):
    pipeline = dataplane.catalog.resolve("custom")
    stages = ("parse", "preprocess", "unit-engine", "postprocess")
    before = stage_counts(*stages)
    enum = sample("serving_custom_custom_lang_total", version="7", value="en")
    stray = sample("serving_custom_undeclared_total", endpoint="custom")
    answer = asyncio.run(dataplane.serve("custom", "7", body({"x": [1, 2]}), None, "application/json"))
    assert orjson.loads(answer.body) == {"y": [2, 4], "state": {"x": [1, 2]}}
    assert (answer.model, answer.version) == ("custom", "7")
    assert pipeline.steps == ["preprocess", "process", "postprocess"]
    assert stage_counts(*stages) == [count + 1 for count in before]
    assert sample("serving_custom_custom_lang_total", version="7", value="en") == enum + 1
    assert sample("serving_custom_undeclared_total", endpoint="custom") == stray + 1


def test_a_version_a_pipeline_refuses_is_a_404_counted_under_it(dataplane):
    refused = sample("serving_endpoint_requests_total", endpoint="custom", version="7", code="404")
    with pytest.raises(NotFound):
        asyncio.run(dataplane.serve("custom", "8", body({"x": [1]}), None, None))
    assert dataplane.catalog.resolve("custom").steps == []
    assert sample("serving_endpoint_requests_total", endpoint="custom", version="7", code="404") == refused + 1


def test_infer_times_the_protocols_parse_and_render_around_the_prediction(dataplane):
    before = stage_counts("parse", "preprocess", "unit-backend", "postprocess")

    async def parse():
        return dataplane.catalog.model_for("minilm"), ["hello", "cat"], {"id": "r1"}

    def render(model, prediction, request):
        return model.endpoint, prediction.token_counts, request["id"]

    assert asyncio.run(dataplane.infer(parse, render)) == ("minilm", [3, 3], "r1")
    assert stage_counts("parse", "preprocess", "unit-backend", "postprocess") == [count + 1 for count in before]


def test_a_request_over_max_batch_tokens_runs_in_several_backend_calls_its_rows_in_order(tmp_path):
    dataplane = make_dataplane(tmp_path, max_batch_tokens=16)
    texts = ["hello", "hello world the quick brown fox", "cat"]  # 3 rows x 8 tokens: 2 rows a call
    prediction = asyncio.run(dataplane.predict(dataplane.catalog.model_for("minilm"), texts))
    assert prediction.outputs[:, 0].tolist() == [3, 8, 3] == prediction.token_counts
    assert dataplane.backend.shapes == [(2, 8), (1, 8)]
    assert dataplane.predictor.budget.used == 0, "the request's tokens went back to the budget"


def test_a_request_over_the_token_budget_is_413_before_anything_runs(tmp_path):
    dataplane = make_dataplane(tmp_path, max_concurrent_tokens=10)
    with pytest.raises(PayloadTooLarge, match="MAX_CONCURRENT_TOKENS"):
        asyncio.run(dataplane.predict(dataplane.catalog.model_for("minilm"), ["hello world the quick brown fox"]))
    assert dataplane.backend.calls == 0


def test_a_request_of_over_half_a_batch_of_tokens_is_not_coalesced(tmp_path):
    dataplane = make_dataplane(tmp_path, coalesce=True, max_batch_tokens=20)
    model = dataplane.catalog.model_for("minilm")
    asyncio.run(dataplane.predict(model, ["hello world the quick brown fox"]))  # about 33 tokens estimated
    assert dataplane.predictor._coalescers == {}, "it ran on its own"
    asyncio.run(dataplane.predict(model, ["cat"]))  # 5 estimated
    assert len(dataplane.predictor._coalescers) == 1


def test_a_cancelled_request_is_counted_499_not_as_its_versions_failure(dataplane):
    """A client gone or a deadline passed (`services.api.lifetime` cancels the request) is no 5xx of the version:
    rollouts judge versions by their 5xx."""
    counted = {
        code: sample("serving_endpoint_requests_total", endpoint="minilm", version="1", code=code)
        for code in ("499", "500")
    }

    async def never() -> bytes:
        await asyncio.Event().wait()
        return b""

    async def run():
        serving = asyncio.ensure_future(dataplane.serve("minilm", None, never, None, None))
        await asyncio.sleep(0.01)
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)

    asyncio.run(run())
    assert sample("serving_endpoint_requests_total", endpoint="minilm", version="1", code="499") == counted["499"] + 1
    assert sample("serving_endpoint_requests_total", endpoint="minilm", version="1", code="500") == counted["500"]


class Echo(Endpoint):
    """An endpoint of neither kind: its own `run`, which answers what it was handed."""

    name = "custom"

    def __init__(self):
        self.calls: list[ServeCall] = []

    async def run(self, call: ServeCall, predict) -> Answer:
        self.calls.append(call)
        return Answer(await call.read(), "echo", call.version or "0")


def test_serve_hands_any_endpoint_its_request_and_declared_statistics_and_answers_what_it_runs(dataplane):
    echo = Echo()
    serve_also(dataplane.catalog, echo)
    read = body({"x": 1})
    answer = asyncio.run(dataplane.serve("custom", "5", read, "caller-7", "application/json"))
    assert answer == Answer(b'{"x":1}', "echo", "5")
    assert echo.calls == [ServeCall("5", read, "caller-7", "application/json", dataplane.catalog.declared("custom"))]


def test_a_pipelines_steps_log_under_its_endpoint_and_version(dataplane):
    seen = []

    class Logging(Pipeline):
        async def process(self, data, state, collect):
            seen.append(model_var.get())
            return data

    serve_also(dataplane.catalog, Logging())
    asyncio.run(dataplane.serve("custom", None, body({"x": [1]}), None, "application/json"))
    assert seen == [("custom", "7", "-")]


def test_an_endpoint_class_missing_a_method_of_its_kind_cannot_be_built():
    class NoVersions(ModelEndpoint):
        def choose(self, version, routing_key): ...

    with pytest.raises(TypeError, match="versions"):
        NoVersions()
    with pytest.raises(TypeError, match="run"):
        type("NoRun", (Endpoint,), {})()


def test_a_pipeline_of_defaults_passes_the_body_through_and_answers_its_one_version(dataplane):
    class Through(PipelineEndpoint):
        name = "through"

    serve_also(dataplane.catalog, Through())
    answer = asyncio.run(dataplane.serve("through", "1", body({"x": [1]}), None, "application/json"))
    assert (orjson.loads(answer.body), answer.model, answer.version) == ({"x": [1]}, "through", "1")
    with pytest.raises(NotFound, match="available: '1'"):
        asyncio.run(dataplane.serve("through", "2", body({"x": [1]}), None, "application/json"))
