"""The manifest of an export: the tensor contract (names, dtypes, shapes), the model's task and tokenization
settings read from its checkpoint, where it came from and how it was built; sealed with the hash of every file
beside it. The exporter writes it this way, and so does the test helper that fakes a model directory."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from services.common.contract import MANIFEST_FILE, BuildInfo, Manifest, SourceInfo, TensorSpec, sha256_file
from services.modelbuild.checkpoint import Checkpoint


def output_name(checkpoint: Checkpoint) -> str:
    return "logits" if checkpoint.task == "classification" else "embedding"


def describe(
    checkpoint: Checkpoint,
    *,
    version: str,
    input_names: list[str],
    width: int,
    sources: dict[str, str],
    stamp: str,
    tools: dict[str, int | str],
) -> Manifest:
    """The manifest of `checkpoint` exported with `input_names` and an output of `width` values per text; its
    `files` are empty and `max_abs_diff` 0 until the export is validated and sealed."""
    return Manifest(
        name=checkpoint.name,
        version=version,
        task=checkpoint.task,
        max_seq_length=checkpoint.max_seq_length,
        pooling=checkpoint.pooling,
        normalize=checkpoint.normalize,
        labels=checkpoint.labels,
        inputs=[TensorSpec(name=n, dtype="INT64", shape=[-1, -1]) for n in input_names],
        outputs=[TensorSpec(name=output_name(checkpoint), dtype="FP32", shape=[-1, width])],
        source=SourceInfo(
            path=str(checkpoint.path),
            package=checkpoint.package,
            package_version=checkpoint.package_version,
            files=sources,
        ),
        build=BuildInfo(
            fingerprint=stamp,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            max_abs_diff=0.0,
            **tools,
        ),
    )


def seal(model_dir: Path, manifest: Manifest) -> Manifest:
    """Record the hash of every other file in `model_dir` in the manifest and write it there."""
    files = sorted(p for p in model_dir.iterdir() if p.is_file() and p.name != MANIFEST_FILE)
    manifest.files = {p.name: sha256_file(p) for p in files}
    manifest.save(model_dir)
    return manifest
