"""A version's drift reference from the data set its registry lineage names: the built-in statistics (token length,
embedding norm or predicted label and top score) of up to `limit` texts of that data set, computed once, when the
controller deploys the version, and saved beside it as `drift_reference.json` for the gateway's drift monitor."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np

from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.onnx_runner import OnnxModel
from services.common.outputs import softmax
from services.common.tokenization import TextTokenizer
from services.monitoring.drift import REFERENCE_FILE

log = logging.getLogger(__name__)


def dataset_texts(lineage: dict, limit: int) -> list[str]:
    """Texts of the first data set in the lineage that is a readable CSV with a `text` column, else none."""
    for dataset in lineage.get("datasets", []):
        path = Path(str(dataset.get("source") or "").removeprefix("file://"))
        if path.suffix != ".csv" or not path.is_file():
            continue
        with open(path, newline="", errors="replace") as handle:
            rows = csv.DictReader(handle)
            if "text" not in (rows.fieldnames or []):
                continue
            return [row["text"] for row, _ in zip(rows, range(limit), strict=False) if row.get("text")]
    return []


def write_reference(model_dir: Path, lineage: dict, limit: int = 500) -> bool:
    texts = dataset_texts(lineage, limit)
    if not texts:
        return False
    manifest = Manifest.load(model_dir)
    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length)
    model = OnnxModel(model_dir, manifest, threads=1)
    lengths, outputs = [], []
    for start in range(0, len(texts), 32):
        encoded = tokenizer.encode(texts[start : start + 32])
        lengths += encoded.token_counts
        outputs.append(model.run(encoded.tensors(manifest.input_names)))
    values = np.concatenate(outputs)
    reference = {"token_length": {"values": lengths, "categorical": False}}
    if manifest.task == "classification":
        probabilities = softmax(values.astype(np.float64))
        labels = manifest.labels or [str(i) for i in range(probabilities.shape[-1])]
        reference["predicted_label"] = {"values": [labels[i] for i in probabilities.argmax(-1)], "categorical": True}
        reference["top_score"] = {"values": probabilities.max(-1).tolist(), "categorical": False}
    else:
        reference["embedding_norm"] = {"values": np.linalg.norm(values, axis=1).tolist(), "categorical": False}
    (model_dir / REFERENCE_FILE).write_text(json.dumps(reference))
    log.info("drift reference of %s: %d texts of its data set", model_dir, len(texts))
    return True
