"""Compose files reference only what they define, every environment variable a template sets for a project service
is a setting that service reads, and the images are built as the project's roles need."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from services.common.settings_env import variables
from services.controller.settings import ControllerSettings
from services.gateway.settings import GatewaySettings
from services.registry.settings import RegistrySettings
from services.replica.settings import AgentSettings
from services.triton.repository import repository_dir
from tests.support.deploy import (
    DEPLOY,
    OVERLAYS,
    compose,
    containers,
    objects,
)
from tests.support.models import ROOT


def test_compose_references_only_what_it_defines():
    """Services, volumes, networks and secrets it names exist; files it mounts exist (secrets: made by a script)."""
    from services.api import gunicorn_conf

    main = compose("docker-compose.yml")
    services = main["services"]
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on missing {dependency}"
        for network in service.get("networks", []):
            assert network in main["networks"], f"{name}: network {network}"
        for secret in service.get("secrets", []):
            assert secret in main["secrets"], f"{name}: secret {secret}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert source.startswith("/var/run") or (DEPLOY / "compose" / source).resolve().exists(), source
            else:
                assert source in main["volumes"], f"{name}: volume {source}"
        for key, value in service.get("environment", {}).items():
            if re.search(r"PASSWORD|SECRET|TOKEN", key):
                assert key.endswith("FILE") and str(value).startswith("/run/secrets/"), f"{name}: {key} inline"
    assert main["networks"]["backend"]["internal"] is True
    published = {name for name, s in services.items() if s.get("ports")}
    assert published == {"gateway", "grafana", "mlflow", "jaeger", "admin"}, "only the API and the UIs"
    assert all(port.startswith("127.0.0.1:") for port in services["admin"]["ports"]), "the admin API: loopback"
    assert int(services["gateway"]["stop_grace_period"].removesuffix("s")) > gunicorn_conf.graceful_timeout
    for secret in main["secrets"].values():
        assert secret["file"].startswith("./secrets/"), "secrets are files the make-secrets.sh script writes"
    script = (DEPLOY / "compose" / "make-secrets.sh").read_text()
    for secret in main["secrets"].values():
        assert Path(secret["file"]).name in script
    cpu = compose("docker-compose.cpu.yml")
    assert set(cpu["services"]) <= set(services) and cpu["services"]["triton"]["image"].split(":")[1].startswith("cpu")


def project_variables() -> dict[str, set[str]]:
    """Every environment variable the templates set for the project's own services, by service."""
    found: dict[str, set[str]] = {}
    for name, service in compose("docker-compose.yml")["services"].items():
        found.setdefault(name, set()).update(service.get("environment", {}))
    for overlay in OVERLAYS:
        for name, container in containers(objects(overlay), init=True):
            found.setdefault(name, set()).update(item["name"] for item in container.get("env", []))
    return found


LIBPQ = {"PGSERVICEFILE"}
"""libpq's own variables a template sets: the state store's connection service file (docs/deployment.md)."""


def reads(settings_class, variable: str) -> bool:
    return variable in {read.name for read in variables(settings_class)}


def test_every_compose_service_logs_to_stdout_through_a_rotated_driver():
    """Issue 37: logs rotate by size with a bounded number of files; in Compose, the runtime's json-file driver does it
    (a service without `logging` would get the daemon's default, unbounded unless the host configured it)."""
    for name, service in compose("docker-compose.yml")["services"].items():
        logging = service.get("logging", {})
        options = logging.get("options", {})
        assert logging.get("driver") == "json-file" and {"max-size", "max-file"} <= set(options), name


def test_every_variable_a_template_sets_is_a_setting_the_service_reads():
    """Each project process's variables against the names the settings class it builds reads (by prefix, or by a
    field's alias such as SERVING_STATE_URL, SERVING_RUN_DIR or MLFLOW_TRACKING_URI): a stale name fails here."""
    settings = {
        "gateway": GatewaySettings,
        "admin": GatewaySettings,  # the admin API: a gateway beside the controller
        "controller": ControllerSettings,
        "agent": AgentSettings,
        "prepare": AgentSettings,  # the Triton pods' agent, as their init step
    }
    checked = 0
    for service, names in project_variables().items():
        for variable in names:
            if variable in LIBPQ:  # read by the PostgreSQL driver of the state store
                continue
            if service in settings:
                settings_class = settings[service]
                if variable == "MLFLOW_TRACKING_URI" and service != "gateway":  # read by their registry adapter
                    settings_class = RegistrySettings
                assert reads(settings_class, variable), f"{service}: {variable}"
            elif service == "triton":  # tritonserver's arguments take the control key from it (`$(VAR)`)
                assert variable == "TRITON_CONTROL_KEY", f"{service}: {variable}"
                continue
            else:  # third-party images' own variables (PostgreSQL, MinIO, Grafana, Jaeger, MLflow's S3 client)
                assert service in {"postgres", "minio", "grafana", "jaeger", "mlflow"}, f"{service}: {variable}"
                continue
            checked += 1
    assert checked >= 15, checked


def test_images_are_multi_stage_pinned_and_non_root():
    for dockerfile in DEPLOY.glob("docker/*.Dockerfile"):
        text = dockerfile.read_text()
        bases = re.findall(r"^FROM (\S+)", text, re.M)
        assert len(bases) >= 2, f"{dockerfile.name}: build and runtime stages"
        assert all(re.search(r":\d[\w.-]*$", base) for base in bases), f"{dockerfile.name}: pinned tags {bases}"
        user = re.findall(r"^USER (\S+)", text, re.M)
        assert user and user[-1] not in ("root", "0"), dockerfile.name
        assert "HEALTHCHECK" in text, dockerfile.name
        for source in re.findall(r"^COPY (?!--from)(\S+) ", text, re.M):
            if not source.startswith(("build/", "${")):  # build/ is made by `make model` / `make model-repo`
                assert (ROOT / source).exists(), f"{dockerfile.name} copies missing {source}"


def test_gateway_image_runs_the_gateway_with_only_the_serving_role():
    gateway = (DEPLOY / "docker" / "gateway.Dockerfile").read_text()
    app = re.search(r"'([\w.]+):(\w+)\(\)'", gateway)
    assert callable(getattr(__import__(app.group(1), fromlist=[app.group(2)]), app.group(2)))
    assert re.findall(r"pip install[^\n]*\.\[(\w[\w,-]*)\]", gateway) == ["serve"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def requirements(extra: str) -> set[str]:
        names = set()
        for requirement in project["optional-dependencies"][extra]:
            name = re.split(r"[\[=<>]", requirement)[0]
            if name == project["name"]:
                for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                    names |= requirements(inner)
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
        "mlflow",
        "pytest",
    }, serving


def test_each_triton_image_is_built_from_its_own_rendering():
    """`make model-repo` writes where the image build reads: GPU rendering -> the default (GPU) image, the CPU
    rendering -> the image the CPU overlay runs."""
    dockerfile = (DEPLOY / "docker" / "triton.Dockerfile").read_text()
    default = re.search(r"^ARG REPOSITORY=(\S+)", dockerfile, re.M).group(1)
    assert Path(default) == repository_dir("container", gpu=True)
    readme = (DEPLOY / "README.md").read_text()
    assert f"--build-arg REPOSITORY={repository_dir('container', gpu=False)}" in readme
    assert "make model-repo TARGET=container GPU=1" in readme and "make model-repo TARGET=container\n" in readme + "\n"
    images = {overlay: dict(containers(objects(overlay)))["triton"]["image"] for overlay in ("gpu", "cpu")}
    assert images["gpu"].split(":")[1].startswith("gpu") and images["cpu"].split(":")[1].startswith("cpu")
    assert f"-t transformer-serving/triton:{images['cpu'].split(':')[1]}" in readme


def test_compose_restricts_tritons_model_control_to_the_controllers_key():
    services = compose("docker-compose.yml")["services"]
    command = " ".join(services["triton"]["entrypoint"])
    for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
        assert f'"{flag}=model-repository,shared-memory,trace,logging:x-model-control-key=$$key"' in command, flag
    assert "cat /run/secrets/triton_control_key" in command
    controller = services["controller"]
    assert controller["environment"]["CONTROLLER_TRITON_CONTROL_KEY_FILE"] == "/run/secrets/triton_control_key"
    assert "triton_control_key" in services["triton"]["secrets"] and "triton_control_key" in controller["secrets"]


STATE_ROLES = {"writer": {"controller", "admin"}, "reporter": {"agent", "prepare"}, "reader": {"gateway"}}
"""Which processes hold which role of the deployment state store (docs/deployment.md, Least privilege)."""
SERVICE_URL = "postgresql+psycopg2://?service=serving_state"


def test_every_process_holds_the_state_role_its_work_needs_and_no_password_in_its_environment():
    """The gateways only read the state, the agents read it and report their replicas, the controller and the admin
    API change it: each reaches the store with its own role, its password in a mounted service file (never in the
    environment or a URL), and only the control plane holds the writer's."""
    for overlay in OVERLAYS:
        secrets = {}  # container -> {mount path: the Secret mounted there}
        for (kind, _), doc in objects(overlay).items():
            if kind != "Deployment":
                continue
            pod = doc["spec"]["template"]["spec"]
            volumes = {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}
            for container in pod["containers"] + pod.get("initContainers", []):
                secrets[container["name"]] = {
                    m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", []) if m.get("readOnly")
                }
        found = dict(containers(objects(overlay), init=True))
        for role, names in STATE_ROLES.items():
            for name in names:
                env = {item["name"]: item for item in found[name]["env"]}
                assert env["SERVING_STATE_URL"]["value"] == SERVICE_URL, name
                folder = str(Path(env["PGSERVICEFILE"]["value"]).parent)
                assert secrets[name][folder] == f"serving-state-{role}", name
        writers = {name for name, mounted in secrets.items() if "serving-state-writer" in mounted.values()}
        assert writers == STATE_ROLES["writer"], writers
        assert "GATEWAY_ADMIN_TOKEN_FILE" not in {item["name"] for item in found["gateway"]["env"]}
    services = compose("docker-compose.yml")["services"]
    for name, secret in [("gateway", "state_reader_service"), ("admin", "state_writer_service")] + [
        ("controller", "state_writer_service")
    ]:
        environment = services[name]["environment"]
        assert environment["SERVING_STATE_URL"] == SERVICE_URL and secret in services[name]["secrets"], name
        assert environment["PGSERVICEFILE"] == f"/run/secrets/{secret}", name
    assert "admin_token" not in services["gateway"].get("secrets", []), "the serving gateway has no admin API"
    assert all(volume.endswith(":ro") for volume in services["gateway"]["volumes"])
    assert not {"state_writer_service", "state_reader_service"} & set(services["mlflow"]["secrets"])
