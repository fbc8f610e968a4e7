"""The deploy templates as the checks read them: kustomize's rendering of an overlay, its objects and containers,
Compose files with their merge tags, checkov with the project's skip list."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.models import ROOT

DEPLOY = ROOT / "deploy"
OVERLAYS = ["gpu", "cpu", "servicemonitor"]
KUBERNETES = "1.30.0"
BIN = Path(sys.executable).parent
CHECKOV = ROOT / ".venv-checks" / "bin" / "checkov"


def kustomize(overlay: str) -> str:
    return subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)], capture_output=True, text=True, check=True
    ).stdout


def objects(overlay: str) -> dict[tuple[str, str], dict]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml.safe_load_all(kustomize(overlay)) if doc}


def containers(rendered: dict, init: bool = False) -> list[tuple[str, dict]]:
    """Every Deployment's containers by container name (`init`: its init containers too)."""
    kinds = ("containers", "initContainers") if init else ("containers",)
    return [
        (c["name"], c)
        for (kind, _), doc in rendered.items()
        if kind == "Deployment"
        for field in kinds
        for c in doc["spec"]["template"]["spec"].get(field, [])
    ]


def checkov(*target: str) -> subprocess.CompletedProcess:
    """checkov with the project's skip list (each skip has its reason in deploy/checkov.yaml)."""
    argv = [str(CHECKOV), *target, "--config-file", str(DEPLOY / "checkov.yaml"), "--quiet", "--compact"]
    return subprocess.run(argv, capture_output=True, text=True)


class ComposeLoader(yaml.SafeLoader):
    """YAML as Compose reads it: its `!reset` and `!override` merge tags."""


def _merge_tag(loader: yaml.SafeLoader, node: yaml.Node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


for tag in ("!reset", "!override"):
    ComposeLoader.add_constructor(tag, _merge_tag)


def compose(name: str) -> dict:
    return yaml.load((DEPLOY / "compose" / name).read_text(), Loader=ComposeLoader)
