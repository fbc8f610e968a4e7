"""Triton's liveness probe: one small inference on a model the server serves, with a deadline.

`/v2/health/live` (and `/v2/health/ready`) answer from Triton's HTTP thread, whatever the models do: with the
encoder's Python stub stopped (SIGSTOP), both stay at 200 while every inference fails with "Stub process is not
healthy"; after a `Signal (11)` with tracing on, live stayed at 200 while every request hung 30 s. An inference is
the only check that fails then. The request is built from the model's own metadata (each input at shape 1 x 1: a
token id, a mask of 1, the text "ok"), so it works for the encoder, the tokenizer and the ensemble alike.

Standard library only: the supervisor imports it, and the Triton image (Python 3.10, no project dependencies
beyond the Python-backend models') runs it as its Kubernetes/Compose liveness probe:

    python3 -m services.triton.liveness --url http://127.0.0.1:8000 --model encoder --timeout 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

FILL = {"BYTES": "ok", "BOOL": True, "FP16": 1.0, "FP32": 1.0, "FP64": 1.0}
"""The value of every element of a probe input, by Triton dtype; integer types get 1 (a valid token id, mask and
token type)."""


class ProbeFailed(Exception):
    """The server did not answer the probe's inference correctly within its deadline."""


def _call(url: str, deadline: float, body: dict | None = None) -> dict:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ProbeFailed("no time left for the inference")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=remaining) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise ProbeFailed(f"{url} answered {exc.code}: {detail}") from None
    except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON
        raise ProbeFailed(f"{url}: {exc}") from None


def probe_request(metadata: dict) -> dict:
    """A one-element inference request for a model, from its metadata (`GET /v2/models/<model>`)."""
    inputs = []
    for spec in metadata.get("inputs", []):
        shape = [1 if dim < 0 else dim for dim in spec["shape"]] or [1]
        count = 1
        for dim in shape:
            count *= dim
        inputs.append(
            {
                "name": spec["name"],
                "datatype": spec["datatype"],
                "shape": shape,
                "data": [FILL.get(spec["datatype"], 1)] * count,
            }
        )
    return {"inputs": inputs}


class InferenceProbe:
    """A callable liveness check (`ProcessSpec.liveness`): raises `ProbeFailed` unless `model` (its `version`, else
    the one Triton picks) answers a small inference within the deadline. The request is built once, from the first
    metadata the server gives."""

    def __init__(self, url: str, model: str, version: str | None = None):
        self.url, self.model, self.version = url.rstrip("/"), model, version
        self.body: dict | None = None

    def __call__(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        base = f"{self.url}/v2/models/{self.model}" + (f"/versions/{self.version}" if self.version else "")
        if self.body is None:
            self.body = probe_request(_call(base, deadline))
        answer = _call(f"{base}/infer", deadline, self.body)
        if not answer.get("outputs"):
            raise ProbeFailed(f"{base}/infer answered without outputs")


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the model answers within the deadline, else print why and exit 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="Triton's HTTP URL")
    parser.add_argument("--model", required=True, help="a model the server serves (encoder, ensemble, ...)")
    parser.add_argument("--timeout", type=float, default=5.0, help="deadline of the whole probe, in seconds")
    args = parser.parse_args(argv)
    try:
        InferenceProbe(args.url, args.model)(args.timeout)
    except ProbeFailed as exc:
        print(f"liveness probe failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
