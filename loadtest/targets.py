"""What an attack sends: targets in each stack's format, and Vegeta's JSON target format.

A gRPC target (format `grpc`) is one unary call of the Open Inference Protocol: its URL is
`grpc://HOST:PORT/inference.GRPCInferenceService/ModelInfer`, its body the serialized KServe v2 `ModelInferRequest`
(`tritonclient.grpc.service_pb2`'s message), its headers the call's metadata."""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

FORMATS = ("serve", "openai", "kserve", "grpc")
GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
"""The method path of the Open Inference Protocol's inference call."""


@dataclass(frozen=True)
class Target:
    method: str
    url: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def build_target(
    base_url: str, fmt: str, texts: list[str], *, endpoint: str = "minilm", model: str = "ensemble"
) -> Target:
    """One request carrying `texts` in the format of a stack's API."""
    base = base_url.rstrip("/")
    headers = {"content-type": "application/json"}
    payload: dict[str, object]
    if fmt == "serve":
        payload = {"text": texts[0]} if len(texts) == 1 else {"texts": texts}
        return Target("POST", f"{base}/serve/{endpoint}", json.dumps(payload).encode(), headers)
    if fmt == "openai":
        payload = {"input": texts[0] if len(texts) == 1 else texts, "model": endpoint}
        return Target("POST", f"{base}/v1/embeddings", json.dumps(payload).encode(), headers)
    if fmt == "kserve":
        payload = {"inputs": [{"name": "TEXT", "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}]}
        return Target("POST", f"{base}/v2/models/{model}/infer", json.dumps(payload).encode(), headers)
    if fmt == "grpc":
        return grpc_target(base, texts, endpoint)
    raise ValueError(f"unknown format '{fmt}'; choose one of {', '.join(FORMATS)}")


def grpc_target(base_url: str, texts: list[str], model: str) -> Target:
    """A `ModelInfer` call to the endpoint `model` at `grpc://HOST:PORT`: its BYTES input TEXT, shape [n, 1], in
    `raw_input_contents` as tritonclient sends it (each text a 4-byte little-endian length and its UTF-8 bytes)."""
    import numpy as np
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.utils import serialize_byte_tensor

    if not base_url.startswith("grpc://"):
        raise ValueError(f"a gRPC target's base URL is grpc://HOST:PORT, not '{base_url}'")
    tensor = pb.ModelInferRequest.InferInputTensor(name="TEXT", datatype="BYTES", shape=[len(texts), 1])
    blob = serialize_byte_tensor(np.array([[t.encode()] for t in texts], dtype=object)).item()
    request = pb.ModelInferRequest(model_name=model, inputs=[tensor], raw_input_contents=[blob])
    return Target("GRPC", f"{base_url.rstrip('/')}{GRPC_INFER}", request.SerializeToString())


def grpc_address(url: str) -> tuple[str, str]:
    """(HOST:PORT, method path) of a gRPC target's URL."""
    rest = url.removeprefix("grpc://")
    address, slash, path = rest.partition("/")
    if not url.startswith("grpc://") or not address or not slash:
        raise ValueError(f"a gRPC target's URL is grpc://HOST:PORT/SERVICE/METHOD, not '{url}'")
    return address, "/" + path


def build_targets(base_url: str, fmt: str, texts: list[str], per_request: int = 1, **kwargs: str) -> list[Target]:
    """Consecutive groups of `per_request` texts, cycling through `texts`."""
    cycle = itertools.cycle(texts)
    count = max(1, len(texts) // per_request)
    return [build_target(base_url, fmt, [next(cycle) for _ in range(per_request)], **kwargs) for _ in range(count)]


def read_vegeta_targets(path: Path) -> list[Target]:
    """Vegeta's `-format=json` targets: one JSON object a line, `body` base64-encoded, `header` name -> [values]."""
    targets = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            body = base64.b64decode(item.get("body") or "")
            headers = {
                k: ", ".join(v) if isinstance(v, list) else str(v) for k, v in (item.get("header") or {}).items()
            }
            targets.append(Target(item.get("method", "GET"), item["url"], body, headers))
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{path}:{number}: not a Vegeta JSON target ({exc})") from None
    if not targets:
        raise ValueError(f"{path} holds no targets")
    return targets


def write_vegeta_targets(targets: list[Target], path: Path) -> None:
    with open(path, "w") as out:
        for t in targets:
            item = {
                "method": t.method,
                "url": t.url,
                "body": base64.b64encode(t.body).decode(),
                "header": {k: [v] for k, v in t.headers.items()},
            }
            out.write(json.dumps(item) + "\n")
