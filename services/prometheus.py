"""A local Prometheus (Debian package `prometheus`) over the stack of one run directory: its configuration is
observability/prometheus/prometheus.yml with each job's target moved to where that run directory's stack listens
(its stack.json), written into the run directory; one more process for the launcher, so it lives with the stacks."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from services.common.errors import ConfigurationError
from services.launcher import ProcessSpec, recorded
from services.launcher.records import read_stack_info

CONFIG_DIR = Path(__file__).resolve().parent.parent / "observability" / "prometheus"
INSTALL_HINT = "Prometheus is not installed: `apt-get install prometheus` (Debian/Ubuntu), then `make observability`"
NAME = "prometheus"
STACK_URLS = {"serving": "metrics", "triton": "triton_metrics", "controller": "controller_metrics"}
"""Each job of prometheus.yml whose target a stack records, and the key of its URL in stack.json's `urls`; the
`loadtest` job (`loadtest attack --metrics-port`) belongs to no stack and keeps its target."""


def default_targets() -> dict[str, list[str]]:
    """Each job of observability/prometheus/prometheus.yml and its targets (the defaults of `make up`)."""
    loaded = yaml.safe_load((CONFIG_DIR / "prometheus.yml").read_text())
    return {
        job["job_name"]: [target for static in job.get("static_configs", []) for target in static.get("targets", [])]
        for job in loaded["scrape_configs"]
    }


def stack_targets(run_dir: Path) -> dict[str, list[str]] | None:
    """Each job's targets where the stack running in `run_dir` listens (a job for a part that stack has not, such as
    Triton under STACK=fastapi, scrapes nothing); None when no stack runs there."""
    running = any(alive for name, alive in recorded(run_dir).items() if name != NAME)
    urls = read_stack_info(run_dir).get("urls") if running else None
    if not isinstance(urls, dict):
        return None
    targets = default_targets()
    for job, key in STACK_URLS.items():
        url = urls.get(key)
        netloc = urlsplit(url).netloc if isinstance(url, str) else ""
        targets[job] = [netloc] if netloc else []
    return targets


def render_config(targets: dict[str, list[str]], rules: Path = CONFIG_DIR / "rules.yml") -> str:
    """prometheus.yml with each job's targets replaced by `targets[job]` and its rules read from `rules`."""
    loaded = yaml.safe_load((CONFIG_DIR / "prometheus.yml").read_text())
    loaded["rule_files"] = [str(rules)]
    for job in loaded["scrape_configs"]:
        job["static_configs"] = [{"targets": list(targets.get(job["job_name"], []))}]
    return yaml.safe_dump(loaded, sort_keys=False)


def prometheus_process(config: Path, data_dir: Path, port: int = 9090, address: str = "127.0.0.1") -> ProcessSpec:
    """The Prometheus binary on PATH with `config`, its database in `data_dir`, its web port on `address`."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise ConfigurationError(INSTALL_HINT)
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address={address}:{port}",
        "--log.level=warn",
    ]
    return ProcessSpec(
        name=NAME, argv=argv, ports=[port], ready_url=f"http://{address}:{port}/-/ready", stop_timeout=10
    )
