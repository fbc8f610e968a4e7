"""When an export can be skipped: the output's manifest carries the same fingerprint and its files are intact.

The fingerprint covers what changes the export: the checkpoint (its name and files), the model version, this
package's code and the toolchain (ONNX opset, torch, transformers, onnx versions)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from services.common.contract import Manifest, sha256_file
from services.common.errors import ServingError
from services.modelbuild.checkpoint import Checkpoint

OPSET = 17


def toolchain() -> dict[str, int | str]:
    """The opset and the versions of the libraries that write the graph, as the manifest's build info names them."""
    import onnx
    import torch
    import transformers

    return {
        "opset": OPSET,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
    }


def builder_digest() -> str:
    """A hash of this package's code: a change to the exporter rebuilds every model."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def source_files(checkpoint: Checkpoint) -> dict[str, str]:
    """sha256 of each of the checkpoint's files, by path inside the checkpoint."""
    return {str(p.relative_to(checkpoint.path)): sha256_file(p) for p in checkpoint.weight_files()}


def fingerprint(checkpoint: Checkpoint, sources: dict[str, str], version: str, tools: dict[str, int | str]) -> str:
    digest = hashlib.sha256()
    for part in (
        checkpoint.name,
        version,
        str(tools["opset"]),
        str(tools["torch"]),
        str(tools["transformers"]),
        str(tools["onnx"]),
        builder_digest(),
        *[f"{k}={v}" for k, v in sorted(sources.items())],
    ):
        digest.update(part.encode())
    return digest.hexdigest()


def up_to_date(out_dir: Path, stamp: str) -> Manifest | None:
    """The manifest in `out_dir` if it was built from the same fingerprint and its files are intact."""
    try:
        current = Manifest.load(out_dir)
        if current.build.fingerprint != stamp:
            return None
        current.verify_files(out_dir)
    except (ServingError, ValueError):  # missing, unreadable or damaged: rebuild
        return None
    return current
