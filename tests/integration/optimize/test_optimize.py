"""`serving model optimize` on the tiny exported model: a real ONNX Runtime optimizer and quantizer, the held-out
set, the gate, and the variant registered as the next version of a real embedded MLflow store."""

from __future__ import annotations

import json

import numpy as np
import pytest

from services.common.contract import MODEL_FILE, QUALITY_FILE, Manifest
from services.common.errors import ModelBuildError
from services.common.onnx_runner import OnnxModel
from services.common.tokenization import TextTokenizer
from services.optimize.build import optimize
from services.optimize.quality import Gate

STRICT = Gate(min_mean_cosine=1.0)
"""A gate no quantized model meets: every int8 output differs from fp32 somewhere."""


@pytest.fixture(scope="module")
def variant(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("variant") / "tiny-int8"
    return out, optimize(tiny_model, out)


def test_the_variant_is_int8_measured_and_served_under_the_same_name(variant, tiny_model):
    out, result = variant
    source, manifest = Manifest.load(tiny_model), Manifest.load(out)
    manifest.verify_files(out, exact=True)
    assert (manifest.endpoint_name, manifest.version, manifest.outputs) == (
        source.endpoint_name,
        source.version,
        source.outputs,
    )
    assert manifest.optimization.variant == "int8" and manifest.optimization.passed
    assert manifest.optimization.recipe["op_types"] == "MatMul"
    report = json.loads((out / QUALITY_FILE).read_text())
    assert report["texts"] >= 1000 and report["failures"] == []
    assert report["mean_cosine"] >= 0.99 and report["topk_agreement"] >= 0.9
    # The graph really holds int8 weights, and answers close to its source.
    assert (
        b"DynamicQuantizeMatMul" in (out / MODEL_FILE).read_bytes()
        or b"MatMulInteger" in (out / MODEL_FILE).read_bytes()
    )
    tokenizer = TextTokenizer(out / "tokenizer.json", manifest.max_seq_length)
    feeds = tokenizer.encode(["a held-out check", "another text"]).tensors(manifest.input_names)
    ours, theirs = OnnxModel(out, manifest).run(feeds), OnnxModel(tiny_model, source).run(feeds)
    assert not np.array_equal(ours, theirs) and np.allclose(ours, theirs, atol=0.05)


def test_a_stack_serves_the_variant_under_the_model_s_name(variant, tiny_model, tmp_path):
    from tests.support.servers import start_http_stack

    out, _ = variant
    server = start_http_stack(tmp_path, out, env={"SERVING_ENDPOINT": Manifest.load(tiny_model).endpoint_name})
    try:
        with server.client() as client:
            answer = client.post("/serve/tiny-bert", json={"texts": ["a held-out check", "another text"]})
    finally:
        server.launcher.stop_all()
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-model-name"] == "tiny-bert" and answer.json()["version"] == "1"
    source = Manifest.load(tiny_model)
    tokenizer = TextTokenizer(tiny_model / "tokenizer.json", source.max_seq_length)
    feeds = tokenizer.encode(["a held-out check", "another text"]).tensors(source.input_names)
    expected = OnnxModel(tiny_model, source).run(feeds)
    assert np.allclose(np.array(answer.json()["embeddings"]), expected, atol=0.05)


def test_an_up_to_date_variant_is_not_rebuilt(variant, tiny_model):
    out, first = variant
    again = optimize(tiny_model, out)
    assert again.skipped and again.manifest.optimization.fingerprint == first.manifest.optimization.fingerprint


def test_a_variant_below_the_gate_is_refused_and_nothing_is_written(tiny_model, tmp_path):
    with pytest.raises(
        ModelBuildError, match=r"below the quality gate on 1200 held-out texts: mean cosine 0\.\d+ < 1\.0"
    ):
        optimize(tiny_model, tmp_path / "refused", gate=STRICT)
    assert not (tmp_path / "refused").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no staging left behind


def test_the_override_writes_it_marked_below_the_gate_with_every_gelu_matmul_kept(tiny_model, tmp_path):
    result = optimize(tiny_model, tmp_path / "overridden", gate=STRICT, allow_below_gate=True)
    info = Manifest.load(tmp_path / "overridden").optimization
    assert result.report.overridden and not info.passed
    assert info.recipe["kept_fp32"] == "2"  # the tiny model has 2 layers: the search tried them all
    assert result.report.failures[0].startswith("mean cosine")


def test_an_optimized_registered_version_becomes_the_next_version_with_lineage(tiny_model, tmp_path):
    from services.optimize.registered import optimize_registered
    from services.registry.mlflow_registry import ModelRegistry
    from services.registry.settings import RegistrySettings

    registry = ModelRegistry(RegistrySettings(run_dir=tmp_path / "run", tracking_uri=None, ui_url="http://ui.test"))
    source = registry.publish(tiny_model, "tiny")
    result, published = optimize_registered(
        f"tiny:{source['version']}",
        variant="int8",
        gate=Gate(),
        allow_below_gate=False,
        out=None,
        register=True,
        registry=registry,
    )
    assert published["version"] == str(int(source["version"]) + 1)
    version = registry.client.get_model_version("tiny", published["version"])
    assert version.tags["variant"] == "int8" and version.tags["source.version"] == source["version"]
    assert "int8 variant of version 1" in version.description and "passed the gate" in version.description
    run = registry.client.get_run(published["run_id"])
    assert run.data.metrics["quality.mean_cosine"] == pytest.approx(result.report.mean_cosine)
    assert run.data.params["optimize.op_types"] == "MatMul"
    artifacts = [a.path for a in registry.client.list_artifacts(published["run_id"], "quality")]
    assert artifacts == ["quality/quality.json"]
    lineage = registry.lineage("tiny", published["version"])
    assert lineage["variant"]["source"] == {
        "name": "tiny",
        "version": source["version"],
        "url": "http://ui.test/#/models/tiny/versions/1?workflowType=machine_learning",
    }
    assert lineage["variant"]["passed"] and lineage["variant"]["quality"]["topk_agreement"] >= 0.9
    fetched = registry.fetch("tiny", published["version"], tmp_path / "fetched")
    assert Manifest.load(fetched).optimization.variant == "int8"


def test_a_classifier_variant_is_scored_on_the_training_example_s_held_out_rows(tiny_classifier, tmp_path):
    result = optimize(tiny_classifier, tmp_path / "classifier-int8")
    report = result.report
    assert (report.task, report.labelled_rows, report.topk_agreement) == ("classification", 80, None)
    assert report.accuracy is not None and report.source_accuracy is not None
    assert report.label_agreement >= 0.98 and report.passed
