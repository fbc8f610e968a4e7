"""The MLflow adapter against a real embedded store: what the controller asks of the registry (versions, fetch,
lineage, tag, promote) after a model took the project's registration path (`publish`, what `register` runs after
the export)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from services.common.contract import Manifest, checked_hashes
from services.common.errors import ConfigurationError, InvalidInput, NotFound, Unavailable
from services.launcher import free_port
from services.registry.mlflow_registry import ARTIFACT_PATH, DatasetRef, code_revision
from tests.support.models import unit_model_dir
from tests.unit.registry.conftest import UI, VIEW


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return unit_model_dir(tmp_path_factory.mktemp("built") / "model")


@pytest.fixture(scope="module")
def published(registry, model_dir, dataset_file) -> dict:
    """Version 1 of `unit-emb`, with a data set; version 2 without."""
    first = registry.publish(model_dir, "unit-emb", dataset=DatasetRef(dataset_file, version="7"))
    second = registry.publish(model_dir, "unit-emb")
    return {"1": first, "2": second}


def test_publish_registers_numbered_versions_with_their_run(published):
    assert [(v["name"], v["version"]) for v in published.values()] == [("unit-emb", "1"), ("unit-emb", "2")]
    assert published["1"]["run_id"] != published["2"]["run_id"], "one run per registration"


def test_versions_are_in_numeric_order_with_the_manifest_hash_tag(registry, published, model_dir):
    manifest_hash = hashlib.sha256(Manifest.load(model_dir).model_dump_json().encode()).hexdigest()[:16]
    versions = registry.versions("unit-emb")
    assert [(v.version, v.run_id) for v in versions] == [(k, p["run_id"]) for k, p in published.items()]
    assert all(v.tags["manifest.sha256"] == manifest_hash for v in versions)


def test_versions_past_nine_sort_as_numbers(registry, published):
    run_id = published["1"]["run_id"]
    registry.client.create_registered_model("many")
    for _ in range(11):
        registry.client.create_model_version("many", source=f"runs:/{run_id}/{ARTIFACT_PATH}", run_id=run_id)
    assert [v.version for v in registry.versions("many")] == [str(n) for n in range(1, 12)]
    assert registry.versions("no such model") == []


@pytest.mark.parametrize("name", ["bob's model", 'say "hi"', "x' AND name LIKE '%"])
def test_a_name_with_a_quote_finds_its_own_versions_and_no_other(registry, published, name):
    """Before: the name was pasted between single quotes into MLflow's filter string, so `bob's model` was a syntax
    error and `x' AND name LIKE '%` a clause of the attacker's (its own versions never found)."""
    run_id = published["1"]["run_id"]
    registry.client.create_registered_model(name)
    registry.client.create_model_version(name, source=f"runs:/{run_id}/{ARTIFACT_PATH}", run_id=run_id)
    assert [(v.name, v.version) for v in registry.versions(name)] == [(name, "1")]


def test_a_name_with_both_quotes_is_refused_saying_so(registry):
    with pytest.raises(InvalidInput, match="both ' and"):
        registry.versions('it\'s "odd"')


def test_fetch_downloads_the_artifacts_the_manifest_hashes(registry, published, model_dir, tmp_path):
    fetched = registry.fetch("unit-emb", "1", tmp_path / "dest")
    assert fetched.is_relative_to(tmp_path / "dest")
    manifest = Manifest.load(fetched)
    manifest.verify_files(fetched)
    assert manifest == Manifest.load(model_dir)
    assert {p.name: p.read_bytes() for p in fetched.iterdir()} == {p.name: p.read_bytes() for p in model_dir.iterdir()}


def test_fetch_of_an_unknown_version_is_not_found(registry, published, tmp_path):
    with pytest.raises(NotFound, match="registry has no version 9 of 'unit-emb'"):
        registry.fetch("unit-emb", "9", tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_version_registered_from_no_run_is_not_found_saying_so(registry, tmp_path):
    registry.client.create_registered_model("no-run")
    registry.client.create_model_version("no-run", source=str(tmp_path))  # a path, as MLflow allows: no run_id
    for attempt in (lambda: registry.fetch("no-run", "1", tmp_path / "dest"), lambda: registry.lineage("no-run", "1")):
        with pytest.raises(NotFound, match="version 1 of 'no-run' was registered from no run"):
            attempt()


@pytest.fixture
def away(registry, tmp_path, monkeypatch):
    """The adapter pointed at a tracking server that is not there (nothing listens on its port)."""
    import mlflow

    from services.registry.mlflow_registry import ModelRegistry
    from services.registry.settings import RegistrySettings

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # as the controller and the agents run it
    before = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    yield ModelRegistry(RegistrySettings(run_dir=tmp_path, tracking_uri=f"http://127.0.0.1:{free_port()}"))
    mlflow.set_tracking_uri(before[0])  # the adapter sets MLflow's process-wide URIs: the ones before it again
    mlflow.set_registry_uri(before[1])


def test_a_registry_that_does_not_answer_is_unavailable_not_a_missing_version(registry, away, tmp_path):
    registry.ping()  # the embedded store always answers
    with pytest.raises(Unavailable, match=rf"the registry at {away.uri} does not answer: .*refused"):
        away.ping()
    with pytest.raises(Unavailable, match=rf"the registry at {away.uri} does not answer"):
        away.fetch("unit-emb", "1", tmp_path)


def test_the_run_records_what_was_built_and_from_what(registry, published, model_dir):
    run = registry.client.get_run(published["1"]["run_id"])
    manifest = Manifest.load(model_dir)
    assert run.info.run_name == "register unit-emb"
    assert run.info.experiment_id == registry.experiment_id()
    assert {k: run.data.tags[k] for k in ("code_revision", "model.task", "model.name")} == {
        "code_revision": code_revision(),
        "model.task": "embedding",
        "model.name": "unit-embedding",
    }
    assert run.data.params == {
        "export.opset": "17",
        "export.torch": "-",
        "export.transformers": "-",
        "export.onnx": "-",
        "export.max_abs_diff": "0.0",
    }
    assert manifest.build.fingerprint not in run.data.params.values()


def test_lineage_names_the_version_its_run_and_its_data_set(registry, published, model_dir, dataset_file):
    run_id = published["1"]["run_id"]
    experiment = registry.experiment_id()
    lineage = registry.lineage("unit-emb", "1", model_dir)
    assert lineage == {
        "registry": {
            "name": "unit-emb",
            "version": "1",
            "url": f"{UI}/#/models/unit-emb/versions/1{VIEW}",
        },
        "run": {
            "id": run_id,
            "name": "register unit-emb",
            "url": f"{UI}/#/experiments/{experiment}/runs/{run_id}{VIEW}",
        },
        "code_revision": code_revision(),
        "datasets": [
            {
                "name": "reviews",
                "digest": DatasetRef(dataset_file).digest,
                "version": "7",
                "source": str(dataset_file.resolve()),
                "run_id": run_id,
                "url": f"{UI}/#/experiments/{experiment}/runs/{run_id}/artifacts/datasets/reviews.csv{VIEW}",
            }
        ],
        "artifacts": checked_hashes(model_dir),
    }
    assert len(lineage["datasets"][0]["digest"]) == 16


def test_lineage_without_a_model_dir_or_data_set(registry, published, tmp_path):
    lineage = registry.lineage("unit-emb", "2")
    assert lineage["datasets"] == [] and "artifacts" not in lineage and "pipeline" not in lineage
    assert "artifacts" not in registry.lineage("unit-emb", "2", tmp_path / "no manifest here")


def test_lineage_follows_a_pipeline_run_and_its_steps(registry, model_dir, dataset_file):
    mlflow = registry.mlflow
    dataset = DatasetRef(dataset_file, "reviews", "8")
    experiment = registry.experiment_id()
    with mlflow.start_run(experiment_id=experiment, run_name="train pipe") as parent:  # as `serving train` does
        with mlflow.start_run(experiment_id=experiment, run_name="2 register", nested=True) as step:
            registered = registry.publish(model_dir, "pipe", run_id=step.info.run_id)
        with mlflow.start_run(experiment_id=experiment, run_name="1 prepare", nested=True) as prepare:
            registry.log_dataset(dataset)
    assert registered["run_id"] == step.info.run_id, "logged into the pipeline's step, not a new run"
    lineage = registry.lineage("pipe", registered["version"])
    assert lineage["pipeline"] == {
        "id": parent.info.run_id,
        "name": "train pipe",
        "url": f"{UI}/#/experiments/{experiment}/runs/{parent.info.run_id}{VIEW}",
        "experiment": {
            "id": experiment,
            "name": "transformer-serving",
            "url": f"{UI}/#/experiments/{experiment}/runs{VIEW}",
        },
        "steps": [
            {
                "name": "1 prepare",
                "id": prepare.info.run_id,
                "url": f"{UI}/#/experiments/{experiment}/runs/{prepare.info.run_id}{VIEW}",
            },
            {
                "name": "2 register",
                "id": step.info.run_id,
                "url": f"{UI}/#/experiments/{experiment}/runs/{step.info.run_id}{VIEW}",
            },
        ],
    }
    assert [(d["name"], d["version"]) for d in lineage["datasets"]] == [("reviews", "8")], "found on a sibling step"
    assert lineage["datasets"][0]["url"] == (
        f"{UI}/#/experiments/{experiment}/runs/{prepare.info.run_id}/artifacts/datasets/reviews.csv{VIEW}"
    )


def test_the_data_set_file_is_kept_as_an_artifact_of_the_run_that_logged_it(registry, published, dataset_file):
    run_id = published["1"]["run_id"]
    copy = registry.mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="datasets/reviews.csv", tracking_uri=registry.uri
    )
    assert Path(copy).read_bytes() == dataset_file.read_bytes()
    assert registry.client.list_artifacts(published["2"]["run_id"], "datasets") == [], "no data set, no copy"


def test_a_data_set_over_the_size_limit_links_to_its_run_instead(registry, model_dir, dataset_file, monkeypatch):
    monkeypatch.setattr(registry.settings, "dataset_artifact_max_mb", dataset_file.stat().st_size / 2e6)
    registered = registry.publish(model_dir, "big-data", dataset=DatasetRef(dataset_file))
    run_id = registered["run_id"]
    assert registry.client.list_artifacts(run_id, "datasets") == []
    [dataset] = registry.lineage("big-data", registered["version"])["datasets"]
    assert dataset["url"] == f"{UI}/#/experiments/{registry.experiment_id()}/runs/{run_id}{VIEW}"


def test_a_missing_data_set_file_is_a_configuration_error(registry, tmp_path):
    run = registry.mlflow.start_run(experiment_id=registry.experiment_id(), run_name="no data")
    with run, pytest.raises(ConfigurationError, match="does not exist"):
        registry.log_dataset(DatasetRef(tmp_path / "missing.csv"))


def test_tag_stores_strings_cut_to_mlflows_limit(registry, published):
    registry.tag("unit-emb", "2", {"deployment": "refused", "attempts": 3, "reason": "x" * 6000})
    tags = {v.version: v.tags for v in registry.versions("unit-emb")}["2"]
    assert (tags["deployment"], tags["attempts"], len(tags["reason"])) == ("refused", "3", 5000)


def test_promote_moves_the_alias_to_the_version(registry, published):
    alias = registry.client.get_model_version_by_alias
    registry.promote("unit-emb", "1")
    assert str(alias("unit-emb", "champion").version) == "1"
    registry.promote("unit-emb", "2")
    assert str(alias("unit-emb", "champion").version) == "2"
    registry.promote("unit-emb", "1", alias="stable")
    assert (str(alias("unit-emb", "stable").version), str(alias("unit-emb", "champion").version)) == ("1", "2")


def test_the_experiment_keeps_its_artifacts_under_the_run_directory(registry):
    experiment = registry.client.get_experiment(registry.experiment_id())
    assert experiment.name == "transformer-serving"
    assert experiment.artifact_location == registry.settings.artifact_uri
    assert registry.settings.artifact_root == registry.settings.run_dir / "mlflow" / "artifacts"
    assert registry.uri == f"sqlite:///{(registry.settings.run_dir / 'mlflow' / 'mlflow.db').resolve()}"


def test_a_pipeline_split_over_two_experiments_links_each_run_to_its_own(registry, model_dir, tmp_path):
    mlflow = registry.mlflow
    elsewhere = registry.client.create_experiment("elsewhere", artifact_location=(tmp_path / "a").as_uri())
    with (
        mlflow.start_run(experiment_id=registry.experiment_id(), run_name="pipe") as parent,
        mlflow.start_run(experiment_id=elsewhere, run_name="register", nested=True) as step,
    ):
        registered = registry.publish(model_dir, "split", run_id=step.info.run_id)
    pipeline = registry.lineage("split", registered["version"])["pipeline"]
    assert pipeline["url"] == f"{UI}/#/experiments/{registry.experiment_id()}/runs/{parent.info.run_id}{VIEW}"
    assert [s["url"] for s in pipeline["steps"]] == [f"{UI}/#/experiments/{elsewhere}/runs/{step.info.run_id}{VIEW}"]


def test_a_fetch_stops_at_the_limit_and_keeps_nothing(registry, tmp_path):
    """The registry's fetch applies `REGISTRY_ARTIFACTS__*` while it streams: a version over the limit is refused
    and nothing of it is left; within the limit, the same version comes down whole. (The limited adapter shares the
    session's store: an adapter sets MLflow's process-wide URIs.)"""
    from services.common.artifacts import ArtifactLimits, ArtifactRefused
    from services.registry.mlflow_registry import ModelRegistry
    from tests.support.models import unit_model_dir

    limited = ModelRegistry(registry.settings.model_copy(update={"artifacts": ArtifactLimits(max_file_bytes=1000)}))
    published = registry.publish(unit_model_dir(tmp_path / "m"), "limited")
    with pytest.raises(ArtifactRefused, match="over the limit of 1000 bytes"):
        limited.fetch("limited", published["version"], tmp_path / "small")
    assert not (tmp_path / "small" / "model").exists()
    fetched = registry.fetch("limited", published["version"], tmp_path / "whole")
    assert sorted(p.name for p in fetched.iterdir()) == sorted(p.name for p in (tmp_path / "m").iterdir())


def test_the_embedded_store_is_readable_by_its_owner_only(registry):
    """Its directory 0700, its database and lock 0600, whatever the umask of the command that created them."""
    store = Path(registry.uri.removeprefix("sqlite:///"))
    assert store.parent.stat().st_mode & 0o777 == 0o700
    modes = {path.name: path.stat().st_mode & 0o777 for path in store.parent.iterdir() if path.is_file()}
    assert modes and set(modes.values()) == {0o600}, modes
    assert {"mlflow.db", "mlflow.lock"} <= set(modes)


def test_every_version_carries_the_manifests_tensor_contract_as_its_signature(registry, published, model_dir):
    """MLflow reads a version's schema from the MLmodel file at its source: the manifest's inputs and outputs, as
    tensor specs; the sealed `model/` artifact the controller fetches holds exactly the manifest's files."""
    import mlflow

    mlflow.set_tracking_uri(registry.uri)
    mlflow.set_registry_uri(registry.uri)
    manifest = Manifest.load(model_dir)
    for version in published:
        info = mlflow.models.get_model_info(f"models:/unit-emb/{version}")
        inputs, outputs = info.signature.inputs.to_dict(), info.signature.outputs.to_dict()
        assert [(t["name"], t["tensor-spec"]["dtype"], list(t["tensor-spec"]["shape"])) for t in inputs] == [
            (t.name, "int64", t.shape) for t in manifest.inputs
        ]
        assert [(t["name"], list(t["tensor-spec"]["shape"])) for t in outputs] == [
            (t.name, t.shape) for t in manifest.outputs
        ]
        assert registry.client.get_model_version("unit-emb", version).source.endswith("/signature")
    listed = registry.client.list_artifacts(published["1"]["run_id"], ARTIFACT_PATH)
    assert {Path(f.path).name for f in listed} == {*manifest.files, "manifest.json"}, "nothing unsealed in model/"
