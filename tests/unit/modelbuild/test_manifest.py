"""The manifest the exporter writes: the tensor contract and settings from the checkpoint, sealed with file hashes."""

from __future__ import annotations

from services.common.contract import MANIFEST_FILE, MODEL_FILE, TOKENIZER_FILE, Manifest, sha256_file
from services.modelbuild.checkpoint import Checkpoint
from services.modelbuild.manifest import describe, output_name, seal
from tests.support.models import UNIT_TOOLCHAIN

INPUTS = ["input_ids", "attention_mask"]


def checkpoint(tmp_path, task: str = "embedding") -> Checkpoint:
    labels = ["negative", "positive"] if task == "classification" else None
    pooling = None if task == "classification" else "cls"
    return Checkpoint(tmp_path, "ck", task, pooling, task == "embedding", 48, labels, "pkg", "1.2")


def test_an_embedding_model_is_described_by_its_checkpoint(tmp_path):
    manifest = describe(
        checkpoint(tmp_path),
        version="3",
        input_names=INPUTS,
        width=384,
        sources={"config.json": "ab"},
        stamp="s",
        tools=UNIT_TOOLCHAIN,
    )
    assert (manifest.name, manifest.version, manifest.task, manifest.max_seq_length) == ("ck", "3", "embedding", 48)
    assert (manifest.pooling, manifest.normalize, manifest.labels) == ("cls", True, None)
    assert [(s.name, s.dtype, s.shape) for s in manifest.inputs] == [(n, "INT64", [-1, -1]) for n in INPUTS]
    assert (manifest.output.name, manifest.output.dtype, manifest.output.shape) == ("embedding", "FP32", [-1, 384])
    assert manifest.source.model_dump() == {
        "path": str(tmp_path),
        "package": "pkg",
        "package_version": "1.2",
        "files": {"config.json": "ab"},
    }
    build = manifest.build.model_dump()
    assert build.pop("created_at").endswith("+00:00")
    assert build == {"fingerprint": "s", "max_abs_diff": 0.0, **UNIT_TOOLCHAIN}
    assert manifest.files == {}, "sealed only once the export has passed its check"


def test_a_classifier_answers_labelled_logits(tmp_path):
    classifier = checkpoint(tmp_path, "classification")
    manifest = describe(
        classifier, version="1", input_names=INPUTS, width=2, sources={}, stamp="s", tools=UNIT_TOOLCHAIN
    )
    assert output_name(classifier) == manifest.output.name == "logits"
    assert (manifest.labels, manifest.pooling, manifest.output.shape) == (["negative", "positive"], None, [-1, 2])


def test_seal_hashes_every_file_beside_the_manifest_and_writes_it(tmp_path):
    (tmp_path / MODEL_FILE).write_bytes(b"graph")
    (tmp_path / TOKENIZER_FILE).write_text("{}")
    (tmp_path / "sub").mkdir()  # folders are not artifacts
    manifest = describe(
        checkpoint(tmp_path), version="1", input_names=INPUTS, width=4, sources={}, stamp="s", tools=UNIT_TOOLCHAIN
    )
    seal(tmp_path, manifest)
    assert manifest.files == {
        MODEL_FILE: sha256_file(tmp_path / MODEL_FILE),
        TOKENIZER_FILE: sha256_file(tmp_path / TOKENIZER_FILE),
    }
    loaded = Manifest.load(tmp_path)
    assert loaded == manifest
    loaded.verify_files(tmp_path)
    assert MANIFEST_FILE not in seal(tmp_path, loaded).files, "sealing again leaves the manifest out of its hashes"
