"""A local Prometheus (Debian package `prometheus`) started with observability/prometheus/prometheus.yml: one more
process for the launcher, so it lives with the stacks; `observability/` holds only its configuration."""

from __future__ import annotations

import shutil
from pathlib import Path

from services.common.errors import ConfigurationError
from services.launcher import ProcessSpec

CONFIG_DIR = Path(__file__).resolve().parent.parent / "observability" / "prometheus"
INSTALL_HINT = "Prometheus is not installed: `apt-get install prometheus` (Debian/Ubuntu), then `make observability`"


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
        name="prometheus", argv=argv, ports=[port], ready_url=f"http://{address}:{port}/-/ready", stop_timeout=10
    )
