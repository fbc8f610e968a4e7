"""Run the real tritonserver binary that ships inside the nvidia-pytriton wheel, without Docker.

The wheel carries Triton 2.51 with the Python backend only. `prepare_backends` copies the backend directory to a
writable place and puts the stub for this Python version into it; the stub imports packages from the `python3`
first on PATH, so the virtual environment's bin goes first.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from services.common.errors import ConfigurationError
from services.common.private import private_tree
from services.launcher import ProcessSpec, local_address
from services.triton.control_key import KEY_FILE, ensure_control_key, restricted_args
from services.triton.liveness import InferenceProbe

PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True)
class TritonPorts:
    """Triton's three ports (KServe v2 HTTP, gRPC, Prometheus metrics) and the address they bind."""

    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002
    address: str = "127.0.0.1"
    """Where all three bind: loopback by default, since only the stack's API port is meant to be public
    (`serving up --triton-address 0.0.0.0` to expose Triton itself)."""


@dataclass(frozen=True)
class TritonInstall:
    """Where the wheel keeps tritonserver and the shared libraries it was built against."""

    root: Path  # .../site-packages/pytriton/tritonserver
    libs: Path  # .../site-packages/nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def stub(self) -> Path:
        return self.root / "python_backend_stubs" / PY_VERSION / "triton_python_backend_stub"


def find_install() -> TritonInstall:
    """The tritonserver of the installed nvidia-pytriton wheel, with a stub for this Python; else what to do."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError("nvidia-pytriton is not installed: run `make setup`")
    package = Path(list(spec.submodule_search_locations)[0])
    install = TritonInstall(package / "tritonserver", package.parent / "nvidia_pytriton.libs")
    if not install.binary.is_file():
        raise ConfigurationError(f"no tritonserver binary at {install.binary}")
    if not install.stub.is_file():
        raise ConfigurationError(f"nvidia-pytriton has no Python-backend stub for Python {PY_VERSION}")
    return install


def missing_libraries(install: TritonInstall, binary: Path) -> list[str]:
    """Shared libraries `binary` needs that the loader cannot find (e.g. the system libpython3.11)."""
    result = subprocess.run(
        ["ldd", str(binary)], capture_output=True, text=True, env={"LD_LIBRARY_PATH": str(install.libs)}
    )
    return [line.split()[0] for line in result.stdout.splitlines() if "not found" in line]


def prepare_backends(install: TritonInstall, dest: Path) -> Path:
    """A fresh copy of the wheel's backends at `dest`, with this Python's stub in the Python backend, its owner's
    alone (the wheel's files are 0644 and 0755)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(install.root / "backends", dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(install.stub, dest / "python" / "triton_python_backend_stub")
    return private_tree(dest)


def check_environment(install: TritonInstall) -> None:
    """Fail before the start when the binary or the stub misses a shared library (naming the Debian package for
    libpython)."""
    for binary in (install.binary, install.stub):
        missing = missing_libraries(install, binary)
        if missing:
            hint = " (Debian: apt-get install libpython3.11)" if any("libpython" in m for m in missing) else ""
            raise ConfigurationError(f"{binary.name} cannot start: missing {', '.join(missing)}{hint}")


def triton_process(
    repository: Path,
    run_dir: Path,
    ports: TritonPorts,
    models: list[str],
    *,
    extra_args: list[str] | None = None,
    name: str = "triton",
    control_key_file: Path | None = None,
) -> ProcessSpec:
    """tritonserver serving `repository` in explicit model-control mode with `models` loaded, its backends prepared
    under `run_dir`; strict readiness, exit on a load error, metrics without GPU metrics. Its liveness is an
    inference on the last of `models` (the ensemble when there is one: it runs every other); with no model to load
    at the start (a replica agent's Triton, `services.replica.host`, adds its own), none. Its model-repository API
    takes only callers holding the key in `control_key_file` (default: in the run directory; generated when missing:
    `services.triton.control_key`)."""
    install = find_install()
    check_environment(install)
    backends = prepare_backends(install, run_dir / f"{name}-backends")
    control_key = ensure_control_key(control_key_file or run_dir / KEY_FILE)
    venv_bin = str(Path(sys.executable).parent)
    argv = [
        str(install.binary),
        f"--model-repository={repository.resolve()}",
        f"--backend-directory={backends.resolve()}",
        "--model-control-mode=explicit",
        *[f"--load-model={model}" for model in models],
        f"--http-port={ports.http}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-port={ports.metrics}",
        f"--http-address={ports.address}",
        f"--grpc-address={ports.address}",
        f"--metrics-address={ports.address}",
        "--allow-metrics=true",
        "--allow-gpu-metrics=false",
        "--allow-cpu-metrics=true",
        "--strict-readiness=true",
        "--exit-on-error=true",
        "--log-verbose=0",
        *restricted_args(control_key),
        *(extra_args or []),
    ]
    env = {
        "LD_LIBRARY_PATH": str(install.libs),
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "TOKENIZERS_PARALLELISM": "false",
    }
    local = f"http://{local_address(ports.address)}:{ports.http}"
    return ProcessSpec(
        name=name,
        argv=argv,
        env=env,
        ports=[ports.http, ports.grpc, ports.metrics],
        ready_url=f"{local}/v2/health/ready",
        stop_timeout=30,
        explain=explain_log,
        liveness=InferenceProbe(local, models[-1]) if models else None,
    )


_LOAD_FAILURE = re.compile(r"failed to load '([^']+)'[^:]*: (.*)")


def explain_log(log_text: str) -> str | None:
    """The model-load failures in a Triton log, as one readable message; None when there are none."""
    failures = []
    for line in log_text.splitlines():
        match = _LOAD_FAILURE.search(line)
        if match:
            reason = match.group(2).split("\\n\\nAt:")[0].strip().rstrip('"')  # drop the Python-backend stack
            failures.append(f"model '{match.group(1)}' failed to load: {reason}")
    return "\n".join(dict.fromkeys(failures)) or None
