"""The key that restricts Triton's model-repository API (load, unload, repository index) to the control plane.

Triton starts with `--http-restricted-api` and `--grpc-restricted-protocol` for the `model-repository` group: a call
without the key (`HEADER` over HTTP, `GRPC_HEADER` over gRPC) is refused, so a client that reaches Triton's ports can
infer but cannot unload a model. The key is generated into the run directory (readable by its owner only) the first
time a Triton is started there; the controller and the replica agents read it from the same file (in Kubernetes, a
Secret). It is on tritonserver's command line, which other users of the host can read unless /proc is mounted with
`hidepid=2`: on a shared host, run Triton as its own user or in its own container."""

from __future__ import annotations

from pathlib import Path

from services.common.errors import ConfigurationError
from services.common.private import ensure_secret

HEADER = "x-model-control-key"
"""The HTTP header carrying the key."""
GRPC_HEADER = f"triton-grpc-protocol-{HEADER}"
"""The gRPC metadata key carrying it (Triton prefixes the configured name for gRPC)."""
KEY_FILE = "triton-control-key"
GROUP = "model-repository"


def ensure_control_key(path: Path) -> str:
    """The key in `path`, generated there (0600) when the file is missing."""
    ensure_secret(Path(path))
    return read_control_key(path)


def read_control_key(path: Path) -> str:
    """The key in `path`; ConfigurationError when the file is missing, unreadable or blank (fail closed)."""
    try:
        key = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigurationError(
            f"the Triton model-control key {path} cannot be read ({exc.strerror}): start Triton with `serving up` or "
            "`serving triton-agent`, which write it, or point the setting at the key Triton was started with"
        ) from None
    if not key or not key.isprintable() or any(c in key for c in ",:= "):
        raise ConfigurationError(
            f"the Triton model-control key {path} is blank or malformed: delete it and start Triton again to "
            "generate a new one"
        )
    return key


def restricted_args(key: str) -> list[str]:
    """tritonserver's arguments that put its model-repository API behind `HEADER: key`, over HTTP and gRPC."""
    return [
        f"--http-restricted-api={GROUP}:{HEADER}={key}",
        f"--grpc-restricted-protocol={GROUP}:{HEADER}={key}",
    ]
