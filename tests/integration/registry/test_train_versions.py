"""The example pipeline's versions differ measurably (docs/lifecycle.md): all-MiniLM-L6-v2 fine-tuned on 32 training
sentences for one epoch (`serving train --train-rows 32 --epochs 1`, version 1) against all 320 for one epoch (a
lower bound of `serving train`'s three), both judged on the same 80 held-out sentences."""

from __future__ import annotations

import pytest

from services.registry.train import DATA, evaluate, fine_tune, read_rows, split

pytestmark = pytest.mark.slow


def test_more_training_data_gives_a_measurably_better_version(tmp_path):
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()  # the classification head's load report: expected
    training, held_out = split(read_rows(DATA), 0.8, seed=0)
    scores = {}
    for name, rows in (("v1", training[:32]), ("v2", training)):
        fine_tune(rows, tmp_path / name, 1, lambda epoch, loss: None)
        scores[name] = evaluate(tmp_path / name, held_out)
    print(f"held-out scores: {scores}")
    assert scores["v1"]["accuracy"] <= 0.75 and scores["v2"]["accuracy"] >= 0.95, scores
    assert scores["v2"]["f1"] - scores["v1"]["f1"] >= 0.2, scores
