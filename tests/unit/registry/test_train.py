"""The example pipeline's data preparation: the shipped data set and its fixed split (training itself needs torch:
the end-to-end tier runs `serving train`)."""

from __future__ import annotations

from services.registry.train import DATA, LABELS, read_rows, split


def test_the_shipped_data_set_is_400_labelled_sentences():
    rows = read_rows(DATA)
    assert len(rows) == 400
    assert {label for _, label in rows} == set(range(len(LABELS)))
    assert all(isinstance(text, str) and text for text, _ in rows)


def test_the_split_is_80_20_disjoint_and_the_same_every_time():
    rows = [(f"text {i}", i % 2) for i in range(100)]
    train, held_out = split(rows, 0.8, seed=0)
    assert (len(train), len(held_out)) == (80, 20)
    assert sorted(train + held_out) == sorted(rows)
    assert split(rows, 0.8, seed=0) == (train, held_out)
    assert split(rows, 0.8, seed=1) != (train, held_out)
