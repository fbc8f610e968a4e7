"""HTTP routes of the serving API: parse requests, call the data plane, and shape each task's JSON response
(embeddings, classifier labels and scores, the OpenAI embeddings format)."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter, Request
from fastapi import Path as FastAPIPath
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from observability import metrics
from observability.logging import set_serving_model
from observability.metrics import metrics_payload, stage
from services.api.body import parse_json, read_body, read_json, validate
from services.api.dataplane import DataPlane, Prediction
from services.api.openapi import EMBEDDINGS_BODY, INFERENCE_ERRORS, NOT_READY, OK, SERVE_BODY, errors
from services.common.backend import ServedModel
from services.common.errors import InvalidInput
from services.common.outputs import classify
from services.common.schemas import EmbeddingsRequest, ServeRequest
from services.monitoring import statistics

router = APIRouter()
ENDPOINT = FastAPIPath(description="The endpoint's name", examples=["minilm"])
VERSION = FastAPIPath(description="One of the endpoint's live versions", examples=["1"])
CANARY_KEY_HEADER = "x-canary-key"


def _dataplane(request: Request) -> DataPlane:
    return request.app.state.dataplane


def _json(model: ServedModel, payload: dict) -> Response:
    headers = {"x-model-name": model.manifest.name, "x-model-version": model.version}
    body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, media_type="application/json", headers=headers)


def serve_payload(model: ServedModel, prediction: Prediction, single: bool) -> dict:
    manifest = model.manifest
    payload: dict = {"model": manifest.name, "version": model.version}
    if manifest.task == "classification":
        results = classify(manifest, prediction.outputs)
        if single:
            payload.update(results[0])
        else:
            payload["predictions"] = results
    elif single:
        payload["embedding"] = prediction.outputs[0]
    else:
        payload["embeddings"] = prediction.outputs
    if single:
        payload["tokens"] = prediction.token_counts[0]
        payload["truncated"] = prediction.truncated[0]
    else:
        payload["tokens"] = prediction.token_counts
        payload["truncated"] = prediction.truncated
    return payload


def pipeline_body(raw: bytes, content_type: str | None):
    """What clearml-serving hands to `preprocess`: the parsed JSON for a JSON body, the raw bytes for any other
    content type (images, audio, protobuf...). No content type, or curl's default form type, is read as JSON."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind in ("", "application/x-www-form-urlencoded") or kind.endswith("json"):
        return parse_json(raw)
    return raw


def _jsonable(value: Any) -> Any:
    """What orjson cannot serialise as-is, the way clearml-serving users' postprocess code returns it."""
    if isinstance(value, np.ndarray):
        return value.tolist()  # a non-contiguous array
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps_any(result: Any, endpoint: str) -> bytes:
    try:
        return orjson.dumps(result, default=_jsonable, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise InvalidInput(
            f"postprocess of endpoint '{endpoint}' returned what JSON cannot carry: {exc}", param="postprocess"
        ) from None


async def serve_core(
    dataplane: DataPlane,
    endpoint: str,
    version: str | None,
    read: Callable[[], Awaitable[bytes]],
    routing_key: str | None = None,
    content_type: str | None = None,
) -> Response:
    """`/serve/{endpoint}[/{version}]`, shared by the FastAPI route and the raw-ASGI fast path (`fastpath`).
    `routing_key` (the `x-canary-key` header) keeps a caller on one version while a canary runs."""
    target = dataplane.resolve(endpoint)
    if not hasattr(target, "choose"):  # a pipeline endpoint: clearml-serving preprocess code serves it
        with stage("parse"):
            body = pipeline_body(await read(), content_type)
        with metrics.endpoint_request(endpoint, target.version):
            result = await target.serve(version, body)
            content = dumps_any(result, endpoint)
        headers = {"x-model-name": endpoint, "x-model-version": target.version}
        return Response(content, media_type="application/json", headers=headers)
    model = target.choose(version, routing_key)
    set_serving_model(endpoint, model.version, model.run_id)  # the request's own context: gone when it ends
    with metrics.endpoint_request(endpoint, model.version):
        with stage("parse"):
            body = validate(ServeRequest, parse_json(await read()))
        prediction = await dataplane.predict(model, body.batch, body.truncate)
        with stage("postprocess"):
            payload = serve_payload(model, prediction, body.text is not None)
            declared = dataplane.endpoints.declared(endpoint)
            if declared is not None:  # the request's fields are copied out only when variables may read them
                statistics.record(
                    endpoint, model.version, declared, None, payload, body.model_dump(), dataplane.monitor
                )
            return _json(model, payload)


async def _serve(request: Request, endpoint: str, version: str | None) -> Response:
    dataplane = _dataplane(request)
    limit = dataplane.settings.max_body_bytes
    return await serve_core(
        dataplane,
        endpoint,
        version,
        lambda: read_body(request.stream(), request.headers, limit),
        request.headers.get(CANARY_KEY_HEADER),
        request.headers.get("content-type"),
    )


@router.post(
    "/serve/{endpoint}",
    summary="Run the endpoint's model on a text or a list of texts",
    responses=OK | INFERENCE_ERRORS,
    openapi_extra=SERVE_BODY,
)
async def serve(request: Request, endpoint: str = ENDPOINT) -> Response:
    return await _serve(request, endpoint, None)


@router.post(
    "/serve/{endpoint}/{version}",
    summary="Run a specific version of the endpoint's model",
    responses=OK | INFERENCE_ERRORS,
    openapi_extra=SERVE_BODY,
)
async def serve_version(request: Request, endpoint: str = ENDPOINT, version: str = VERSION) -> Response:
    return await _serve(request, endpoint, version)


@router.post(
    "/v1/embeddings",
    summary="OpenAI-compatible embeddings",
    responses=OK | INFERENCE_ERRORS,
    openapi_extra=EMBEDDINGS_BODY,
)
async def embeddings(request: Request) -> Response:
    dataplane = _dataplane(request)
    with stage("parse"):
        body = validate(EmbeddingsRequest, await read_json(request, dataplane.settings.max_body_bytes))
    model = dataplane.model_named(body.model)
    manifest = model.manifest
    if manifest.task != "embedding":
        raise InvalidInput(f"model '{manifest.name}' is a classifier; use /serve/{{endpoint}}")
    if body.dimensions is not None and body.dimensions != manifest.output_dim:
        raise InvalidInput(
            f"dimensions={body.dimensions} is not supported; this model returns {manifest.output_dim}",
            param="dimensions",
        )
    prediction = await dataplane.predict(model, body.batch)
    with stage("postprocess"):
        vectors = prediction.outputs.astype(np.float32, copy=False)
        if body.encoding_format == "base64":
            items = [base64.b64encode(row.astype("<f4").tobytes()).decode() for row in vectors]
        else:
            items = list(vectors)
        tokens = sum(prediction.token_counts)
        return _json(
            model,
            {
                "object": "list",
                "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(items)],
                "model": manifest.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


@router.get("/health/live", summary="The process is up")
async def live() -> dict:
    return {"status": "alive"}


@router.get("/health/ready", summary="The model is loaded, warmed up and its backend answers", responses=OK | NOT_READY)
async def ready(request: Request) -> JSONResponse:
    dataplane = _dataplane(request)
    ok = await dataplane.is_ready()
    body = {"status": "ready" if ok else "not ready", "endpoints": dataplane.endpoint_names()}
    if errors := dataplane.endpoints.errors():
        body["config_errors"] = errors  # the valid endpoints are served; these are not
    if dataplane.builtin:
        body |= {"model": dataplane.builtin.model.manifest.name, "version": dataplane.builtin.model.version}
    return JSONResponse(body, status_code=200 if ok else 503, headers=None if ok else {"Retry-After": "1"})


@router.get(
    "/metrics",
    summary="Prometheus metrics, merged over all workers",
    responses=errors(401),
    response_class=PlainTextResponse,
)
async def prometheus_metrics() -> Response:
    payload, content_type = metrics_payload()
    return Response(payload, media_type=content_type)
