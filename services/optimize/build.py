"""A built model -> its optimized variant beside it: the graph steps (`graph`), the variant measured against its
source on the held-out texts (`quality`), refused below the gate unless overridden, and a sealed model directory
any stack serves under the source's name (the endpoint does not change).

int8 keeps in fp32 the fewest of the MatMuls a GELU feeds, first ones first, that the gate needs (`write_model`).
Skipped when the output is up to date: its manifest names the same source manifest, recipe, gate, ONNX Runtime and
code (`fingerprint`), and its files are intact. Written to a staging directory first, like an export, so a refused
or failed variant leaves nothing behind."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.common.contract import (
    MANIFEST_FILE,
    MODEL_FILE,
    QUALITY_FILE,
    REFERENCE_FILE,
    TOKENIZER_FILE,
    Manifest,
    OptimizationInfo,
    sha256_file,
)
from services.common.errors import ConfigurationError, ModelBuildError, ServingError
from services.common.onnx_runner import OnnxModel, default_threads
from services.common.tokenization import TextTokenizer
from services.modelbuild.manifest import seal
from services.optimize.graph import Recipe, after_gelu, check_variant, optimize_graph, quantize_int8
from services.optimize.heldout import HELDOUT, heldout_texts, labelled_rows
from services.optimize.quality import Gate, QualityReport, measure

log = logging.getLogger(__name__)
BATCH = 32


@dataclass(frozen=True)
class Optimized:
    manifest: Manifest
    report: QualityReport
    skipped: bool = False


def default_out(source_dir: Path, variant: str) -> Path:
    """Where a variant is written unless told: beside its source, `<source>-<variant>` (build/model-int8)."""
    source_dir = Path(source_dir)
    return source_dir.with_name(f"{source_dir.name}-{variant}")


def fingerprint(source_dir: Path, recipe: Recipe, gate: Gate) -> str:
    import onnxruntime

    digest = hashlib.sha256()
    parts = [sha256_file(source_dir / MANIFEST_FILE), str(recipe), gate.model_dump_json(), onnxruntime.__version__]
    parts += [sha256_file(path) for path in sorted(Path(__file__).parent.glob("*.py"))]
    parts.append(sha256_file(HELDOUT))
    for part in parts:
        digest.update(part.encode())
    return digest.hexdigest()


def optimize(
    source_dir: Path,
    out_dir: Path | None = None,
    *,
    variant: str = "int8",
    gate: Gate | None = None,
    allow_below_gate: bool = False,
    force: bool = False,
    labelled: list[tuple[str, int]] | None = None,
) -> Optimized:
    """Write the `variant` of the model built in `source_dir` into `out_dir` (default `default_out`) and return its
    manifest and quality report. ModelBuildError naming each failed gate when it measures below `gate` and
    `allow_below_gate` is off. `labelled`: (text, label index) rows a classifier's accuracy is measured on (default:
    `serving train`'s held-out rows for a classifier with its labels)."""
    source_dir = Path(source_dir)
    out_dir = Path(out_dir) if out_dir is not None else default_out(source_dir, variant)
    gate = gate or Gate()
    check_variant(variant)
    source = Manifest.load(source_dir)
    source.verify_files(source_dir)
    if source.optimization is not None:
        variant_of = source.optimization.variant
        raise ConfigurationError(f"{source_dir} is already a {variant_of} variant: optimize the model it was made from")
    recipe = Recipe(variant)
    stamp = fingerprint(source_dir, recipe, gate)
    if not force and (current := _up_to_date(out_dir, stamp)) is not None:
        log.info("%s variant in %s is up to date", variant, out_dir)
        return current

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}-") as tmp:
        staging, work = Path(tmp) / "model", Path(tmp) / "work"
        staging.mkdir()
        work.mkdir()
        for name in (TOKENIZER_FILE, REFERENCE_FILE):
            if (source_dir / name).is_file():
                shutil.copyfile(source_dir / name, staging / name)
        log.info("optimizing %s into its %s variant", source_dir, variant)
        rows = labelled if labelled is not None else labelled_rows(source.labels)
        judge = Judge(source_dir, source, gate, variant=variant, labelled=rows)
        report, kept = write_model(source_dir / MODEL_FILE, staging, work, recipe, judge)
        if report.failures and not allow_below_gate:
            raise ModelBuildError(
                f"the {variant} variant of {source.name} is below the quality gate on {report.texts} held-out texts: "
                f"{'; '.join(report.failures)}. Nothing was written; --allow-below-gate writes it anyway"
            )
        report = report.model_copy(update={"overridden": bool(report.failures)})
        (staging / QUALITY_FILE).write_text(report.model_dump_json(indent=2) + "\n")
        manifest = describe(source, source_dir, recipe.describe(kept), stamp, report)
        seal(staging, manifest)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        shutil.copytree(staging, out_dir)
    return Optimized(manifest, report)


def write_model(
    source: Path, staging: Path, work: Path, recipe: Recipe, judge: Judge
) -> tuple[QualityReport, list[str]]:
    """The variant's model file in `staging`, its quality report and the nodes left in fp32. int8: quantized with
    none of the GELU-fed MatMuls in fp32, then the first one, the first two, ... until the variant passes its gate
    (or all of them are, and it still does not)."""
    model = staging / MODEL_FILE
    if recipe.variant == "fp16":
        optimize_graph(source, model, gpu=True, fp16=True)
        return judge(staging), []
    optimized = work / "optimized.onnx"
    fused = optimize_graph(source, optimized)
    log.info("graph: %s", ", ".join(f"{k} {v}" for k, v in fused.items()) or "nothing fused")
    candidates = after_gelu(optimized)
    for count in range(len(candidates) + 1):
        kept = candidates[:count]
        quantize_int8(optimized, model, recipe, kept)
        report = judge(staging)
        log.info("int8 with %d of %d GELU-fed MatMuls in fp32: %s", count, len(candidates), report.metrics())
        if report.passed:
            break
    return report, kept


class Judge:
    """Measures a variant directory against its source on the held-out texts (the source's outputs computed once)."""

    def __init__(
        self,
        source_dir: Path,
        manifest: Manifest,
        gate: Gate,
        *,
        variant: str,
        labelled: list[tuple[str, int]] | None = None,
    ):
        self.manifest, self.gate = manifest, gate
        self.device = "cuda" if variant == "fp16" else "cpu"
        self.tokenizer = TextTokenizer(source_dir / TOKENIZER_FILE, manifest.max_seq_length)
        self.texts = heldout_texts()
        self.labelled = labelled if labelled and manifest.task == "classification" else None
        source = self._model(source_dir)
        self.source_outputs = outputs(source, self.tokenizer, self.texts)
        self.source_labelled = outputs(source, self.tokenizer, self._labelled_texts()) if self.labelled else None

    def __call__(self, variant_dir: Path) -> QualityReport:
        variant = self._model(variant_dir)
        rows = None
        if self.labelled and self.source_labelled is not None:
            truth = np.array([label for _, label in self.labelled])
            rows = (truth, self.source_labelled, outputs(variant, self.tokenizer, self._labelled_texts()))
        variant_outputs = outputs(variant, self.tokenizer, self.texts)
        return measure(self.source_outputs, variant_outputs, task=self.manifest.task, gate=self.gate, labelled=rows)

    def _model(self, model_dir: Path) -> OnnxModel:
        return OnnxModel(model_dir, self.manifest, threads=default_threads(), device=self.device)

    def _labelled_texts(self) -> list[str]:
        return [text for text, _ in self.labelled or []]


def describe(source: Manifest, source_dir: Path, recipe: dict[str, str], stamp: str, report: QualityReport) -> Manifest:
    """The source's manifest (same name, version and contract, so the endpoint is the same) with the variant's
    `optimization`."""
    import onnxruntime

    manifest = source.model_copy(deep=True)
    manifest.optimization = OptimizationInfo(
        variant=recipe["variant"],
        fingerprint=stamp,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        onnxruntime=onnxruntime.__version__,
        recipe=recipe,
        source_manifest=sha256_file(source_dir / MANIFEST_FILE),
        quality=report.metrics(),
        passed=report.passed,
    )
    return manifest


def outputs(model: OnnxModel, tokenizer: TextTokenizer, texts: list[str]) -> np.ndarray:
    """The model's contract output for `texts`, in batches of BATCH."""
    names = model.manifest.input_names
    parts = [model.run(tokenizer.encode(texts[i : i + BATCH]).tensors(names)) for i in range(0, len(texts), BATCH)]
    return np.concatenate(parts).astype(np.float32)


def _up_to_date(out_dir: Path, stamp: str) -> Optimized | None:
    try:
        current = Manifest.load(out_dir)
        if current.optimization is None or current.optimization.fingerprint != stamp:
            return None
        current.verify_files(out_dir, exact=True)
        report = QualityReport.model_validate_json((out_dir / QUALITY_FILE).read_text())
    except (ServingError, ValueError, OSError):  # missing, unreadable or damaged: rebuild
        return None
    return Optimized(current, report, skipped=True)
