"""When `make model` may skip the export: same fingerprint, intact files. Anything else rebuilds."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from services.common.contract import MANIFEST_FILE, MODEL_FILE
from services.modelbuild.checkpoint import Checkpoint
from services.modelbuild.fingerprint import builder_digest, fingerprint, source_files, up_to_date
from tests.support.models import UNIT_TOOLCHAIN, unit_model_dir


@pytest.fixture
def checkpoint(tmp_path) -> Checkpoint:
    path = tmp_path / "checkpoint"
    (path / "1_Pooling").mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "1_Pooling" / "config.json").write_text("{}")
    return Checkpoint(path, "ck", "embedding", "mean", True, 64, None)


def test_source_files_hash_every_checkpoint_file_by_its_relative_path(checkpoint):
    assert set(source_files(checkpoint)) == {"config.json", "1_Pooling/config.json"}
    assert len(set(source_files(checkpoint).values())) == 1, "same bytes, same hash"


def test_the_fingerprint_changes_with_whatever_changes_the_graph(checkpoint):
    sources = source_files(checkpoint)
    stamp = fingerprint(checkpoint, sources, "1", UNIT_TOOLCHAIN)
    assert fingerprint(checkpoint, dict(sources), "1", dict(UNIT_TOOLCHAIN)) == stamp, "deterministic"
    changed = [
        fingerprint(checkpoint, sources, "2", UNIT_TOOLCHAIN),
        fingerprint(replace(checkpoint, name="other"), sources, "1", UNIT_TOOLCHAIN),
        fingerprint(checkpoint, {**sources, "config.json": "0" * 64}, "1", UNIT_TOOLCHAIN),
        fingerprint(checkpoint, sources, "1", {**UNIT_TOOLCHAIN, "opset": 18}),
        fingerprint(checkpoint, sources, "1", {**UNIT_TOOLCHAIN, "torch": "3.0"}),
        fingerprint(checkpoint, sources, "1", {**UNIT_TOOLCHAIN, "onnx": "2.0"}),
    ]
    assert stamp not in changed and len(set(changed)) == len(changed)


def test_the_builder_digest_covers_this_package_code():
    assert builder_digest() == builder_digest() and len(builder_digest()) == 64


def test_an_intact_output_of_the_same_fingerprint_is_up_to_date(tmp_path):
    model_dir = unit_model_dir(tmp_path / "m")  # its manifest's fingerprint is "unit"
    current = up_to_date(model_dir, "unit")
    assert current is not None and current.name == "unit-embedding"


def test_another_fingerprint_rebuilds(tmp_path):
    assert up_to_date(unit_model_dir(tmp_path / "m"), "another") is None


def test_a_missing_or_damaged_output_rebuilds(tmp_path):
    assert up_to_date(tmp_path / "nothing", "unit") is None
    damaged = unit_model_dir(tmp_path / "damaged")
    (damaged / MODEL_FILE).write_bytes(b"changed after the export")
    assert up_to_date(damaged, "unit") is None
    missing = unit_model_dir(tmp_path / "missing")
    (missing / MODEL_FILE).unlink()
    assert up_to_date(missing, "unit") is None
    unreadable = unit_model_dir(tmp_path / "unreadable")
    (unreadable / MANIFEST_FILE).write_text(json.dumps({"name": "half a manifest"}))
    assert up_to_date(unreadable, "unit") is None
