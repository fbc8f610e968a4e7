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
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)], capture_output=True, text=True, check=True
    ).stdout
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml.safe_load_all(rendered) if doc}


def container(objects, name):
    return objects[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("overlay", ["gpu", "cpu"])
def test_kubernetes_overlays_render_and_wire_the_gateway_to_triton(overlay):
    objects = kustomize(overlay)
    assert {
        ("Deployment", "triton"),
        ("Deployment", "gateway"),
        ("Service", "triton"),
        ("Service", "gateway"),
        ("HorizontalPodAutoscaler", "gateway"),
    } <= set(objects)
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


def container_ports(service: dict) -> set[int]:
    return {int(str(p).split(":")[-1]) for p in service.get("ports", []) + service.get("expose", [])}


def test_compose_file_is_consistent_with_itself_and_the_code():
    """Checked against what it must agree with, not against copies of its own values: the services it names exist
    and expose the ports used, every gateway variable is a real setting, the drain outlasts gunicorn's."""
    from services.api import gunicorn_conf

    compose = yaml.safe_load((DEPLOY / "compose" / "docker-compose.yml").read_text())
    services = compose["services"]
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on missing {dependency}"
    gateway = services["gateway"]
    fields = set(GatewaySettings.model_fields)
    for variable in gateway["environment"]:
        assert variable.removeprefix("GATEWAY_").split("__")[0].lower() in fields, variable
    host, port = gateway["environment"]["GATEWAY_TRITON_GRPC_URL"].split(":")
    assert int(port) in container_ports(services[host])
    grace = int(gateway["stop_grace_period"].removesuffix("s"))
    assert grace > gunicorn_conf.graceful_timeout, "Compose must not SIGKILL the gateway while it drains"
    prometheus = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    for job in prometheus["scrape_configs"]:
        for target in job["static_configs"][0]["targets"]:
            host, port = target.split(":")
            assert int(port) in container_ports(services[host]), f"{job['job_name']} scrapes {target}"
    for volume in services["prometheus"]["volumes"]:
        source = volume.split(":")[0]
        assert (DEPLOY / "compose" / source).resolve().exists(), f"prometheus mounts missing {source}"


def test_the_gateway_image_installs_only_the_serving_role():
    """No load generator, plotting, export toolchain or local Triton wheel in the gateway image."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    gateway = (DEPLOY / "docker" / "gateway.Dockerfile").read_text()
    assert re.findall(r"pip install[^\n]*\.\[(\w[\w,-]*)\]", gateway) == ["serve"]
    assert "COPY loadtest" not in gateway and "COPY model_repository" not in gateway

    def requirements(extra: str, seen: set[str] = frozenset()) -> set[str]:
        names = set()
        for requirement in project["optional-dependencies"][extra]:
            name = re.split(r"[\[=<>]", requirement)[0]
            if name == project["name"]:
                for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                    names |= requirements(inner, seen | {extra})
            else:
                names.add(name)
        return names

    serving = requirements("serve") | {re.split(r"[\[=<>]", r)[0] for r in project["dependencies"]}
    assert not serving & {
        "aiohttp",
        "hdrhistogram",
        "matplotlib",
        "torch",
        "transformers",
        "onnx",
        "nvidia-pytriton",
        "pytest",
    }, serving


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
