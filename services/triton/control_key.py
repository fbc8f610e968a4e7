"""The key that restricts Triton's control APIs to the control plane: the model repository (load, unload, index),
shared memory (registering a region Triton then writes outputs into: a region of another process crashes Triton),
tracing and logging settings.

Triton starts with `--http-restricted-api` and `--grpc-restricted-protocol` for those groups (`GROUP`): a call
without the key (`HEADER` over HTTP, `GRPC_HEADER` over gRPC) is refused, so a client that reaches Triton's ports can
infer but can neither unload a model nor make Triton write into memory of its choosing. Nothing in the serving path
uses those APIs (the gateway sends tensors over gRPC).

The key is generated into the run directory (readable by its owner only) the first time a Triton is started there;
the controller and the replica agents read it from the same file (in Kubernetes, a Secret). It is on tritonserver's
command line, which other users of the host can read unless /proc is mounted with `hidepid=2`: on a shared host, run
Triton as its own user or in its own container."""

from __future__ import annotations

from pathlib import Path

from services.common.errors import ConfigurationError
from services.common.private import ensure_secret

HEADER = "x-model-control-key"
"""The HTTP header carrying the key."""
GRPC_HEADER = f"triton-grpc-protocol-{HEADER}"
"""The gRPC metadata key carrying it (Triton prefixes the configured name for gRPC)."""
KEY_FILE = "triton-control-key"
GROUP = "model-repository,shared-memory,trace,logging"
"""The restricted API groups, as tritonserver takes them."""


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
    """tritonserver's arguments that put its control APIs (`GROUP`) behind `HEADER: key`, over HTTP and gRPC."""
    return [
        f"--http-restricted-api={GROUP}:{HEADER}={key}",
        f"--grpc-restricted-protocol={GROUP}:{HEADER}={key}",
    ]
