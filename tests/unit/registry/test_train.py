"""The example pipeline: the shipped data set and its fixed split, and the runs it leaves in MLflow (training and
the export need torch: here they are stood in for, and the end-to-end tier runs `serving train` for real)."""

from __future__ import annotations

import pytest

from services.registry import train
from services.registry.train import DATA, LABELS, read_rows, split
from tests.support.models import unit_model_dir


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


@pytest.fixture
def pipeline_run(registry, monkeypatch, tmp_path) -> dict:
    """`run_pipeline` against the embedded store, fine-tuning, evaluation and the export stood in for."""
    model_dir = unit_model_dir(tmp_path / "model", "classification")
    monkeypatch.setattr(train, "fine_tune", lambda rows, out, epochs, on_epoch, base=None: on_epoch(0, 0.5))
    monkeypatch.setattr(train, "evaluate", lambda checkpoint, rows: {"accuracy": 0.9, "f1": 0.8})
    publish = registry.publish
    monkeypatch.setattr(registry, "register", lambda checkpoint, name, **kw: publish(model_dir, name, **kw))
    return train.run_pipeline("nested", epochs=1, registry=registry)


def test_the_pipeline_and_its_steps_are_one_experiment_each_step_nested_under_the_parent(registry, pipeline_run):
    parent = registry.client.get_run(pipeline_run["pipeline_run_id"])
    steps = registry.client.search_runs(
        [str(e.experiment_id) for e in registry.client.search_experiments()],
        filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
    )
    experiments = {run.info.run_name: run.info.experiment_id for run in [parent, *steps]}
    print(f"experiment of each run: {experiments}")
    assert experiments == dict.fromkeys(
        ["train nested", "1 prepare", "2 train", "3 evaluate", "4 register"], registry.experiment_id()
    ), "MLflow nests a child under its parent only within one experiment"
    assert {run.data.tags["mlflow.parentRunId"] for run in steps} == {parent.info.run_id}
    assert registry.client.get_experiment(registry.experiment_id()).name == "transformer-serving"


def test_the_trained_versions_lineage_links_every_run_under_that_experiment(registry, pipeline_run):
    lineage = registry.lineage("nested", pipeline_run["version"])
    experiment = f"/#/experiments/{registry.experiment_id()}/runs/"
    urls = [lineage["run"]["url"], lineage["pipeline"]["url"], *(s["url"] for s in lineage["pipeline"]["steps"])]
    print("lineage links:", *urls, lineage["datasets"][0]["url"], sep="\n  ")
    assert len(urls) == 6 and all(experiment in url for url in urls)
    assert lineage["pipeline"]["experiment"]["name"] == "transformer-serving"
    assert "/artifacts/datasets/sentiment.csv?workflowType=machine_learning" in lineage["datasets"][0]["url"]


def test_train_rows_trains_on_the_first_rows_of_the_split_and_logs_how_many(registry, monkeypatch, tmp_path):
    """`serving train --train-rows 32`: the weaker version a better one is compared with trains on 32 sentences,
    and its runs say so; it is evaluated on the same held-out split as every other version."""
    model_dir = unit_model_dir(tmp_path / "model", "classification")
    trained_on, evaluated_on = [], []
    monkeypatch.setattr(
        train, "fine_tune", lambda rows, out, epochs, on_epoch, base=None: (trained_on.append(rows), on_epoch(0, 0.5))
    )
    monkeypatch.setattr(train, "evaluate", lambda checkpoint, rows: evaluated_on.append(rows) or {"accuracy": 0.6})
    publish = registry.publish
    monkeypatch.setattr(registry, "register", lambda checkpoint, name, **kw: publish(model_dir, name, **kw))
    weak = train.run_pipeline("subset", epochs=1, registry=registry, train_rows=32)
    full = train.run_pipeline("subset", epochs=1, registry=registry)
    training, held_out = split(read_rows(DATA), 0.8, seed=0)
    assert trained_on == [training[:32], training] and evaluated_on == [held_out, held_out]
    steps = registry.client.search_runs(
        [registry.experiment_id()], filter_string=f"tags.mlflow.parentRunId = '{weak['pipeline_run_id']}'"
    )
    prepare = next(run for run in steps if run.info.run_name == "1 prepare")
    assert prepare.data.params["train_rows"] == "32" and (weak["version"], full["version"]) == ("1", "2")
    with pytest.raises(ValueError, match="--train-rows takes 1 to 320"):
        train.subset(training, 321)
