"""The deploy templates render and agree with the code they deploy (no Docker engine or cluster here)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from services.gateway.settings import GatewaySettings
from tests.support.models import ROOT

DEPLOY = ROOT / "deploy"


def kustomize(overlay: str) -> dict[tuple[str, str], dict]:
    rendered = subprocess.run(["kubectl", "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)],
                              capture_output=True, text=True, check=True).stdout
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml.safe_load_all(rendered) if doc}


def container(objects, name):
    return objects[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("overlay", ["gpu", "cpu"])
def test_kubernetes_overlays_render_and_wire_the_gateway_to_triton(overlay):
    objects = kustomize(overlay)
    assert {("Deployment", "triton"), ("Deployment", "gateway"), ("Service", "triton"), ("Service", "gateway"),
            ("HorizontalPodAutoscaler", "gateway")} <= set(objects)
    gateway = container(objects, "gateway")
    env = {item["name"]: item["value"] for item in gateway["env"]}
    host, port = env["GATEWAY_TRITON_GRPC_URL"].split(":")
    assert host == "triton" and int(port) in [p["port"] for p in objects[("Service", "triton")]["spec"]["ports"]]
    fields = set(GatewaySettings.model_fields)
    for name in env:  # every variable is a real gateway setting
        assert name.removeprefix("GATEWAY_").split("__")[0].lower() in fields, name
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    triton = container(objects, "triton")
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    gpus = triton["resources"].get("limits", {}).get("nvidia.com/gpu")
    assert (gpus == 1) if overlay == "gpu" else gpus is None


def test_compose_file_wires_the_same_services():
    compose = yaml.safe_load((DEPLOY / "compose" / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["gateway"]["environment"]["GATEWAY_TRITON_GRPC_URL"] == "triton:8001"
    assert services["gateway"]["depends_on"]["triton"]["condition"] == "service_healthy"
    assert services["triton"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    prometheus = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in prometheus["scrape_configs"]}
    assert targets == {"serving": ["gateway:8080"], "triton": ["triton:8002"]}


def test_dockerfiles_start_what_exists():
    gateway = (DEPLOY / "docker" / "gateway.Dockerfile").read_text()
    app = re.search(r"'([\w.]+):(\w+)\(\)'", gateway)
    module = __import__(app.group(1), fromlist=[app.group(2)])
    assert callable(getattr(module, app.group(2)))
    assert "python:services.api.gunicorn_conf" in gateway
    for dockerfile in DEPLOY.glob("docker/*.Dockerfile"):
        for source in re.findall(r"^COPY (\S+) ", dockerfile.read_text(), re.M):
            if not source.startswith("build/"):  # build/ is made by `make model` / `serving model-repo`
                assert (ROOT / source).exists(), f"{dockerfile.name} copies missing {source}"
