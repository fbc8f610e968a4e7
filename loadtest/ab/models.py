"""Each tree's models, exported by that tree's own builder (`serving model build`) from the same checkpoints: the
real one (all-MiniLM-L6-v2, into the tree's build/model, as `make model` does) and the tiny one (one seeded
`serving model tiny` checkpoint, written once by HEAD, into <work_dir>/models/<tree>/tiny-bert).

BASE serves HEAD's build when it would build the same: HEAD's environment (the same toolchain) and the same
builder code (services/modelbuild and services/common, byte for byte). Otherwise its output directory starts as a
copy of HEAD's when it has none: its builder keeps a model whose fingerprint (checkpoint, toolchain, the builder's
own code) matches its own and exports again otherwise."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from loadtest.ab.trees import Tree, TreeError

TINY_NAME = "tiny-bert"
BUILDER_CODE = ("services/modelbuild", "services/common")


@dataclass(frozen=True)
class BuiltModel:
    tree: str
    model: str
    path: Path
    how: str
    """`exported` or `up to date` (the builder's words), with `, seeded from HEAD's` for a copied start."""


def model_dir(tree: Tree, model: str, work_dir: Path) -> Path:
    if model == "real":
        return tree.root / "build" / "model"
    return (work_dir / "models" / tree.name.lower() / TINY_NAME).resolve()


def tiny_checkpoint(head: Tree, work_dir: Path, given: Path | None = None) -> Path:
    """The tiny checkpoint both trees export: `given`, or <work_dir>/tiny-checkpoint written once by HEAD."""
    if given is not None:
        if not (given / "config.json").is_file():
            raise TreeError(f"--tiny-checkpoint {given} is not a checkpoint directory (no config.json)")
        return given.resolve()
    path = (work_dir / "tiny-checkpoint").resolve()
    if not (path / "config.json").is_file():
        _run(head, "model", "tiny", str(path))
    return path


def build_model(tree: Tree, model: str, work_dir: Path, checkpoint: Path | None, seed: Path | None) -> BuiltModel:
    """`serving model build` of `tree` for `model` into its directory, seeded from `seed` (HEAD's build) when
    that directory is missing."""
    out = model_dir(tree, model, work_dir)
    seeded = False
    if seed is not None and not out.exists() and seed.is_dir():
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(seed, out)
        seeded = True
    args = ["model", "build", "--out", str(out)]
    if model == "tiny":
        args += ["--model-dir", str(checkpoint), "--name", TINY_NAME]
    output = _run(tree, *args)
    how = "exported" if "exporting" in output else "up to date"
    return BuiltModel(tree.name, model, out, how + (", seeded from HEAD's" if seeded else ""))


def code_digest(root: Path) -> str:
    """A hash of the builder's code in a tree: every .py file under BUILDER_CODE, by path and content."""
    digest = hashlib.sha256()
    for folder in BUILDER_CODE:
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_models(head: Tree, base: Tree, models: list[str], work_dir: Path, tiny: Path | None) -> list[BuiltModel]:
    """Every model for HEAD, then for BASE: HEAD's build when BASE would build the same, else BASE's own (seeded
    from HEAD's)."""
    checkpoint = tiny_checkpoint(head, work_dir, tiny) if "tiny" in models else None
    built = [build_model(head, model, work_dir, checkpoint, None) for model in models]
    if base.pythonpath and code_digest(head.root) == code_digest(base.root):
        return built + [
            BuiltModel(base.name, m.model, m.path, "HEAD's build (the same builder and toolchain)") for m in built
        ]
    return built + [build_model(base, m.model, work_dir, checkpoint, m.path) for m in built]


def _run(tree: Tree, *args: str) -> str:
    result = tree.serving(*args)
    if result.returncode != 0:
        raise TreeError(f"{tree.name}: `serving {' '.join(args)}` failed:\n{result.stdout[-2000:]}")
    return result.stdout
