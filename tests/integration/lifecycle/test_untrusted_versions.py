"""Registered versions are untrusted input: versions whose manifests try to inject Triton configuration, point at
files outside their artifact, or whose artifact holds a link, each shipping a Python file that leaves a marker if it
ever runs, are published to a real registry and deployed by the real controller into a real Triton. Every one is
rejected with a reason naming the broken rule and no path of the host; no marker appears; nothing goes live; the
rejected versions' files are deleted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx

from services.common.contract import MANIFEST_FILE, TOKENIZER_FILE, sha256_file
from services.triton.control_key import HEADER, KEY_FILE, read_control_key

ENDPOINT, REGISTERED = "evil", "evil-model"


def _evil_code(marker: Path) -> str:
    """A Python-backend model that works as the encoder and leaves `marker` when Triton (or anything) imports it."""
    return (
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('the artifact ran code')\n"
        "from model_repository.encoder.model import TritonPythonModel  # noqa: F401\n"
    )


def _publish(stack, model_dir: Path) -> str:
    mlflow = stack.registry.mlflow
    with mlflow.start_run(experiment_id=stack.registry.experiment_id(), run_name="untrusted upload") as run:
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
    version = stack.registry.client.create_model_version(
        REGISTERED, source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id
    )
    return str(version.version)


def _versions(stack) -> dict[str, dict]:
    answer = httpx.get(f"{stack.url}/models/{ENDPOINT}", timeout=10)
    return {v["version"]: v for v in answer.json()["versions"]} if answer.status_code == 200 else {}


def test_hostile_versions_are_rejected_and_never_run(stack, checkpoints, tmp_path):
    from services.modelbuild.export import build

    good = tmp_path / "good"
    build(good, checkpoints["a"])
    outside = tmp_path / "outside.txt"
    outside.write_text("a file of the controller's host")
    repository_to_models = "../../../lifecycle/models"  # from <run>/triton-repository/<endpoint>/<version>/
    stack.registry.client.create_registered_model(REGISTERED)
    stack.admin("PUT", f"/endpoints/{ENDPOINT}/auto-update", {"name": REGISTERED, "max_versions": 9})

    def injected_output(version: str) -> dict:
        path = f"{repository_to_models}/{ENDPOINT}/{version}/model/evil.py"
        return {
            "outputs": [
                {
                    "name": f'embedding" data_type: TYPE_FP32 dims: [ 32 ] }} ] default_model_filename: "{path}" '
                    'output [ { name: "x',
                    "dtype": "FP32",
                    "shape": [-1, 32],
                }
            ]
        }

    attacks = {
        "outputs.0.name": injected_output,
        "outputs.0.name (newline and comment)": lambda v: {
            "outputs": [{"name": "embedding\n# default_model_filename: 'evil.py'", "dtype": "FP32", "shape": [-1, 32]}]
        },
        "outputs.0.name (5,000 characters)": lambda v: {
            "outputs": [{"name": "e" * 5000, "dtype": "FP32", "shape": [-1, 32]}]
        },
        "name": lambda v: {"name": 'tiny" backend: "evil'},
        "files (a file outside that exists)": lambda v: {"files_add": {str(outside): sha256_file(outside)}},
        "files (a file outside that does not)": lambda v: {"files_add": {str(tmp_path / "nothing"): "0" * 64}},
        "files (climbing out)": lambda v: {"files_add": {"../../../../../etc/hostname": "0" * 64}},
        "unsealed file": lambda v: {},
    }
    published: dict[str, str] = {}
    for number, (attack, change) in enumerate(attacks.items(), start=1):
        model_dir = tmp_path / f"attack-{number}"
        shutil.copytree(good, model_dir)
        manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
        edit = change(str(number))
        manifest["files"].update(edit.pop("files_add", {}))
        manifest.update(edit)
        (model_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
        (model_dir / "evil.py").write_text(_evil_code(tmp_path / f"marker-{number}"))
        assert _publish(stack, model_dir) == str(number), "versions are numbered in the order published"
        published[str(number)] = attack

    linked = tmp_path / "linked"  # an artifact store tampered with: its tokenizer a link to a file of the host
    shutil.copytree(good, linked)
    version = _publish(stack, linked)
    run_id = stack.registry.client.get_model_version(REGISTERED, version).run_id
    stored = Path(stack.registry.client.get_run(run_id).info.artifact_uri.removeprefix("file://")) / "model"
    os.remove(stored / TOKENIZER_FILE)
    os.symlink(good / TOKENIZER_FILE, stored / TOKENIZER_FILE)
    published[version] = "a link"

    stack.wait_for(
        "every hostile version rejected",
        lambda: {v: s["state"] for v, s in _versions(stack).items()} == dict.fromkeys(published, "rejected"),
        timeout=120,
    )
    versions = _versions(stack)
    expected = {
        "outputs.0.name": "outputs.0.name: ",
        "name": "name: a model name must match",
        "files": "files: ",
        "unsealed file": "files its manifest does not seal: ['evil.py']",
        "a link": "link or a special file",
    }
    for version, attack in published.items():
        reason = versions[version]["reason"]
        assert expected[attack.split(" (")[0]] in reason, (attack, reason)
        assert str(tmp_path) not in reason and "/etc/" not in reason and "default_model_filename" not in reason
    assert versions["5"]["reason"] == versions["6"]["reason"], "a reason never says whether a host file exists"

    assert not list(tmp_path.glob("marker-*")), "no code shipped in an artifact ever ran"
    key = {HEADER: read_control_key(stack.options.run_dir / KEY_FILE)}
    index = httpx.post(f"{stack.triton}/v2/repository/index", json={}, headers=key, timeout=10).json()
    assert not [m for m in index if m["name"] == ENDPOINT and m.get("state") == "READY"], index
    models = stack.options.run_dir / "lifecycle" / "models" / ENDPOINT
    assert not (models.exists() and any(models.iterdir())), "rejected versions' files are deleted"
    tags = {v.version: v.tags for v in stack.registry.versions(REGISTERED)}
    assert all(tags[v]["deployment"] == "rejected" for v in published)
