"""`serving train`: an example training pipeline that ends in the registry, as MLflow runs a user can click through.

A parent run with one child run per step:
1. prepare   the shipped sentiment data set (`data/sentiment.csv`, 400 labelled sentences), split 80/20 with a fixed
             seed, logged as an MLflow dataset input (name, version, digest, source);
2. train     all-MiniLM-L6-v2 with a classification head, fine-tuned for a few epochs (loss per epoch);
3. evaluate  accuracy and F1 on the held-out split;
4. register  the checkpoint exported to ONNX and registered as a new version (`ModelRegistry.register`), so the
             version's lineage leads back to this pipeline, its steps and the data set.

Two versions that measurably differ: one trained on the first few sentences of the training split for one epoch
(`serving train --train-rows 32 --epochs 1`), one on all of them (`serving train`); each run logs its accuracy and F1
on the same held-out split."""

from __future__ import annotations

import csv
import json
import logging
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from services.registry.mlflow_registry import DatasetRef, ModelRegistry

log = logging.getLogger(__name__)
DATA = Path(__file__).resolve().parent / "data" / "sentiment.csv"
DATA_VERSION = "1"
LABELS = ["negative", "positive"]


def read_rows(path: Path) -> list[tuple[str, int]]:
    with open(path, newline="") as handle:
        return [(row["text"], LABELS.index(row["label"])) for row in csv.DictReader(handle)]


def split(rows: list, fraction: float, seed: int) -> tuple[list, list]:
    shuffled = rows[:]
    random.Random(seed).shuffle(shuffled)
    cut = int(len(shuffled) * fraction)
    return shuffled[:cut], shuffled[cut:]


def fine_tune(
    rows: list[tuple[str, int]],
    out: Path,
    epochs: int,
    on_epoch: Callable[[int, float], object],
    base: Path | None = None,
) -> None:
    """Fine-tune `base` (default: all-MiniLM-L6-v2) with a fresh classification head on `rows`, saved to `out`."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    from services.modelbuild.checkpoint import default_checkpoint_dir

    torch.manual_seed(0)
    base = base or default_checkpoint_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    model = BertForSequenceClassification.from_pretrained(
        str(base),
        local_files_only=True,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    model.train()
    for epoch in range(epochs):
        order = rows[:]
        random.Random(epoch).shuffle(order)
        total = 0.0
        for start in range(0, len(order), 16):
            batch = order[start : start + 16]
            encoded = tokenizer(
                [t for t, _ in batch], padding=True, truncation=True, max_length=64, return_tensors="pt"
            )
            loss = model(**encoded, labels=torch.tensor([y for _, y in batch])).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(batch)
        on_epoch(epoch, total / len(order))
    model.eval()
    model.save_pretrained(str(out))
    tokenizer.model_max_length = 128
    tokenizer.save_pretrained(str(out))


def evaluate(checkpoint: Path, rows: list[tuple[str, int]]) -> dict[str, float]:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True)
    model = BertForSequenceClassification.from_pretrained(str(checkpoint), local_files_only=True).eval()
    with torch.no_grad():
        encoded = tokenizer([t for t, _ in rows], padding=True, truncation=True, max_length=64, return_tensors="pt")
        predicted = model(**encoded).logits.argmax(-1).tolist()
    truth = [y for _, y in rows]
    true_pos = sum(p == y == 1 for p, y in zip(predicted, truth, strict=True))
    precision = true_pos / max(1, sum(predicted))
    recall = true_pos / max(1, sum(truth))
    return {
        "accuracy": sum(p == y for p, y in zip(predicted, truth, strict=True)) / len(rows),
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
    }


def run_pipeline(
    name: str,
    epochs: int = 3,
    data: Path = DATA,
    registry: ModelRegistry | None = None,
    base: Path | None = None,
    train_rows: int | None = None,
) -> dict:
    """The four steps as nested runs of one parent, all in the registry's experiment; `base`: the checkpoint to
    fine-tune (default all-MiniLM-L6-v2; tests pass the tiny one); `train_rows`: train on the first N sentences of
    the training split only (a weaker version to compare with; default: all of them)."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()  # load reports of the classification head: expected, not news
    registry = registry or ModelRegistry()
    mlflow = registry.mlflow
    dataset = DatasetRef(data, "sentiment", DATA_VERSION)
    rows = read_rows(data)
    training, eval_rows = split(rows, 0.8, seed=0)
    training = subset(training, train_rows)  # a wrong count ends here, before any run starts
    experiment = registry.experiment_id()
    started = time.monotonic()
    # Each step names the experiment too: a nested run does not inherit its parent's, and would land in MLflow's
    # Default experiment, its artifacts under ./mlruns wherever the command ran.
    with (
        mlflow.start_run(experiment_id=experiment, run_name=f"train {name}") as parent,
        tempfile.TemporaryDirectory() as tmp,
    ):
        mlflow.set_tags({"pipeline": "serving train", "dataset.digest": dataset.digest})
        with mlflow.start_run(experiment_id=experiment, run_name="1 prepare", nested=True):
            registry.log_dataset(dataset)
            mlflow.log_params(
                {"rows": len(rows), "train_rows": len(training), "eval_rows": len(eval_rows), "split_seed": 0}
            )
        checkpoint = Path(tmp) / f"{name}-minilm"
        with mlflow.start_run(experiment_id=experiment, run_name="2 train", nested=True):
            base_model = base.name if base else "all-MiniLM-L6-v2"
            mlflow.log_params({"base_model": base_model, "epochs": epochs, "batch_size": 16, "lr": 5e-5})
            fine_tune(
                training, checkpoint, epochs, lambda epoch, loss: mlflow.log_metric("loss", loss, step=epoch), base
            )
        with mlflow.start_run(experiment_id=experiment, run_name="3 evaluate", nested=True):
            scores = evaluate(checkpoint, eval_rows)
            mlflow.log_metrics(scores)
        with mlflow.start_run(experiment_id=experiment, run_name="4 register", nested=True) as register_run:
            registered = registry.register(checkpoint, name, dataset=dataset, run_id=register_run.info.run_id)
        mlflow.log_metrics({**scores, "pipeline_seconds": time.monotonic() - started})
    return {**registered, "pipeline_run_id": parent.info.run_id, **{k: round(v, 4) for k, v in scores.items()}}


def subset(training: list, count: int | None) -> list:
    """The first `count` rows of the training split (all of them when None); ValueError naming the size otherwise."""
    if count is None:
        return training
    if not 1 <= count <= len(training):
        raise ValueError(f"--train-rows takes 1 to {len(training)} (the training split's size), not {count}")
    return training[:count]


def main_json(name: str, epochs: int, train_rows: int | None = None) -> str:
    return json.dumps(run_pipeline(name, epochs, train_rows=train_rows), indent=2)
