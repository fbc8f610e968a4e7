"""The Kubernetes templates and the Dockerfiles, checked offline with the tools platform teams use (no Docker engine
or cluster here): kustomize renders every overlay, kubernetes-validate checks it strictly against the Kubernetes 1.30
API, checkov and hadolint find nothing that is not skipped with a reason, workloads are hardened and probed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.deploy import (
    BIN,
    CHECKOV,
    DEPLOY,
    KUBERNETES,
    OVERLAYS,
    checkov,
    containers,
    kustomize,
    objects,
)


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request, tmp_path_factory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp("k8s") / f"{request.param}.yaml"
    path.write_text(kustomize(request.param))
    return request.param, path


def test_every_overlay_validates_strictly_against_the_kubernetes_api(rendered):
    overlay, path = rendered
    result = subprocess.run(
        [str(BIN / "kubernetes-validate"), "--strict", "-k", KUBERNETES, "--quiet", str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    unknown = re.findall(r"Couldn't find schema for kind (\w+)", result.stdout + result.stderr)
    assert set(unknown) <= {"ServiceMonitor"}, "only prometheus-operator's CRD has no schema in the API"


def test_every_overlay_passes_checkov_with_only_the_listed_skips(rendered):
    assert CHECKOV.exists(), "checkov is installed by `make deploy-checks` (make test runs it)"
    _, path = rendered
    result = checkov("-f", str(path), "--framework", "kubernetes")
    assert result.returncode == 0, result.stdout[-3000:]


def test_dockerfiles_pass_checkov_and_hadolint():
    policy = checkov("-d", str(DEPLOY / "docker"), "--framework", "dockerfile")
    assert policy.returncode == 0, policy.stdout[-3000:]
    hadolint = subprocess.run(
        [str(BIN / "hadolint"), *map(str, sorted((DEPLOY / "docker").glob("*.Dockerfile")))],
        capture_output=True,
        text=True,
    )
    assert hadolint.returncode == 0, hadolint.stdout + hadolint.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workloads_are_hardened_and_probed(overlay):
    rendered = objects(overlay)
    for name, container in containers(rendered):
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"], name
        assert context["capabilities"] == {"drop": ["ALL"]}, name
        assert container["resources"]["requests"] and container["resources"]["limits"], name
        assert "readinessProbe" in container and "livenessProbe" in container, name
    for name in ("gateway", "triton"):
        assert ("PodDisruptionBudget", name) in rendered
    gateway = dict(containers(rendered))["gateway"]
    assert gateway["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    from services.api import gunicorn_conf

    grace = rendered[("Deployment", "gateway")]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > gunicorn_conf.graceful_timeout + 5, "Kubernetes must not SIGKILL a draining gateway"
    gpus = dict(containers(rendered))["triton"]["resources"]["limits"].get("nvidia.com/gpu")
    assert (gpus == 1) if overlay != "cpu" else gpus is None


def test_only_the_gateway_reaches_tritons_grpc_port():
    policies = [doc for (kind, _), doc in objects("gpu").items() if kind == "NetworkPolicy"]
    assert any(
        p["spec"]["podSelector"] == {} and p["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in p["spec"]
        for p in policies
    ), "a default deny"
    triton = next(p for p in policies if p["spec"]["podSelector"].get("matchLabels") == {"app": "triton"})
    grpc = [rule for rule in triton["spec"]["ingress"] if {"port": 8001, "protocol": "TCP"} in rule["ports"]]
    assert [rule["from"] for rule in grpc] == [[{"podSelector": {"matchLabels": {"app": "gateway"}}}]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_tritons_model_control_needs_the_key_the_agents_hold(overlay):
    """Triton's model-repository API is restricted to the Secret's control key, over HTTP and gRPC; the pod's agent
    (init and sidecar) reads the same key from the Secret, mounted read-only."""
    from services.triton.control_key import GROUP, HEADER

    found = dict(containers(objects(overlay), init=True))
    args = found["triton"]["args"]
    for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
        assert f"{flag}={GROUP}:{HEADER}=$(TRITON_CONTROL_KEY)" in args, flag
    (key,) = [item for item in found["triton"]["env"] if item["name"] == "TRITON_CONTROL_KEY"]
    assert key["valueFrom"]["secretKeyRef"] == {"name": "serving-tokens", "key": "triton-control-key"}
    for agent in ("prepare", "agent"):
        env = {item["name"]: item.get("value") for item in found[agent]["env"]}
        path = env["AGENT_TRITON_CONTROL_KEY_FILE"]
        mounts = {m["mountPath"]: m for m in found[agent]["volumeMounts"]}
        assert mounts[str(Path(path).parent)]["readOnly"] is True, agent
