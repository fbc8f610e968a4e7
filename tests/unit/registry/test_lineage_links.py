"""The lineage's links into the MLflow UI, built from run entities alone: each run under its own experiment, the
data set at the copy of its file, names quoted as the UI quotes them. (tests/e2e/test_lineage_browser.py opens
them in a browser.)"""

from __future__ import annotations

import json
from types import SimpleNamespace

from services.registry.lineage import UiLinks, datasets, pipeline
from tests.unit.registry.conftest import UI, VIEW

LINKS = UiLinks(UI)


def run(run_id: str, experiment_id: str, name: str = "", inputs: list | None = None):
    return SimpleNamespace(
        info=SimpleNamespace(run_id=run_id, experiment_id=experiment_id, run_name=name),
        inputs=SimpleNamespace(dataset_inputs=inputs or []),
    )


def dataset_input(name: str, digest: str, source: str, **tags: str):
    return SimpleNamespace(
        dataset=SimpleNamespace(name=name, digest=digest, source=source),
        tags=[SimpleNamespace(key=k, value=v) for k, v in tags.items()],
    )


def test_a_run_links_to_its_own_experiment_and_an_artifact_below_it():
    assert LINKS.run(run("r1", "7")) == f"{UI}/#/experiments/7/runs/r1{VIEW}"
    assert (
        LINKS.run(run("r1", "7"), "datasets/my data.csv")
        == f"{UI}/#/experiments/7/runs/r1/artifacts/datasets/my%20data.csv{VIEW}"
    )
    assert LINKS.experiment("7") == f"{UI}/#/experiments/7/runs{VIEW}"


def test_a_version_link_quotes_the_model_name_as_one_path_segment():
    assert LINKS.version("sentiment", "3") == f"{UI}/#/models/sentiment/versions/3{VIEW}"
    assert LINKS.version("my model/v2", "1") == f"{UI}/#/models/my%20model%2Fv2/versions/1{VIEW}"


def test_a_pipeline_names_its_experiment_and_links_every_step_to_its_own():
    parent = run("p", "1", "train s")
    steps = [run("b", "1", "2 train"), run("a", "4", "1 prepare")]
    assert pipeline(parent, steps, "transformer-serving", LINKS) == {
        "id": "p",
        "name": "train s",
        "url": f"{UI}/#/experiments/1/runs/p{VIEW}",
        "experiment": {
            "id": "1",
            "name": "transformer-serving",
            "url": f"{UI}/#/experiments/1/runs{VIEW}",
        },
        "steps": [
            {"name": "1 prepare", "id": "a", "url": f"{UI}/#/experiments/4/runs/a{VIEW}"},
            {"name": "2 train", "id": "b", "url": f"{UI}/#/experiments/1/runs/b{VIEW}"},
        ],
    }


def test_a_data_set_links_to_its_copy_or_else_to_the_run_that_logged_it():
    source = json.dumps({"uri": "/data/reviews.csv"})
    copied = dataset_input("reviews", "d1", source, version="2", artifact="datasets/reviews.csv")
    uncopied = dataset_input("big", "d2", "/data/big.parquet")
    found = datasets([run("r", "3", inputs=[copied]), run("s", "5", inputs=[uncopied])], LINKS)
    assert found == [
        {
            "name": "reviews",
            "digest": "d1",
            "version": "2",
            "source": "/data/reviews.csv",
            "run_id": "r",
            "url": f"{UI}/#/experiments/3/runs/r/artifacts/datasets/reviews.csv{VIEW}",
        },
        {
            "name": "big",
            "digest": "d2",
            "version": None,
            "source": "/data/big.parquet",
            "run_id": "s",
            "url": f"{UI}/#/experiments/5/runs/s{VIEW}",
        },
    ]


def test_a_data_set_logged_on_several_runs_links_to_the_first_of_them():
    first, second = (dataset_input("reviews", "d1", "/r.csv", artifact="datasets/r.csv") for _ in range(2))
    found = datasets([run("version-run", "1", inputs=[first]), run("prepare", "1", inputs=[second])], LINKS)
    assert [(d["run_id"], d["url"]) for d in found] == [
        ("version-run", f"{UI}/#/experiments/1/runs/version-run/artifacts/datasets/r.csv{VIEW}")
    ]
    assert datasets([SimpleNamespace(info=None, inputs=None)], LINKS) == []
