"""The FastAPI routes of the serving API other than `/serve` (its door is `serve_route`) and `/v2` (`v2`): the OpenAI
embeddings route, which translates its body to the data plane and the prediction back, and the OpenAI models list
(the names it accepts); health; metrics."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import numpy as np
from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from observability.metrics import metrics_payload
from services.api import paths
from services.api.body import read_json, validate
from services.api.catalog import Catalog
from services.api.dataplane import Answer, DataPlane, Prediction
from services.api.openapi import EMBEDDINGS_BODY, INFERENCE_ERRORS, NOT_READY, OK, errors, ok
from services.api.payloads import dumps
from services.api.serve_route import respond
from services.common.backend import ServedModel
from services.common.errors import InvalidInput, NotFound
from services.common.schemas import EmbeddingsRequest, ModelCard, ModelList

router = APIRouter()
OWNER = "transformer-serving"
"""The `owned_by` of every model the OpenAI surface lists."""
MODEL = Path(description="A name `/v1/models` lists", examples=["minilm"])


def _dataplane(request: Request) -> DataPlane:
    return request.app.state.dataplane


def _embeds(model: ServedModel) -> bool:
    return model.manifest.task == "embedding"


def _check_embeddings(model: ServedModel, body: EmbeddingsRequest) -> None:
    manifest = model.manifest
    if not _embeds(model):
        raise InvalidInput(f"model '{manifest.name}' is a classifier; use /serve/{{endpoint}}")
    if body.dimensions is not None and body.dimensions != manifest.output_dim:
        raise InvalidInput(
            f"dimensions={body.dimensions} is not supported; this model returns {manifest.output_dim}",
            param="dimensions",
        )


def _render_embeddings(model: ServedModel, prediction: Prediction, body: EmbeddingsRequest) -> Answer:
    vectors = prediction.outputs.astype(np.float32, copy=False)
    if body.encoding_format == "base64":
        items = [base64.b64encode(row.astype("<f4").tobytes()).decode() for row in vectors]
    else:
        items = list(vectors)
    tokens = sum(prediction.token_counts)
    payload = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(items)],
        "model": model.manifest.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return Answer(dumps(payload), model.manifest.name, model.version, prediction.device)


@router.post(
    paths.EMBEDDINGS,
    summary="OpenAI-compatible embeddings",
    responses=OK | INFERENCE_ERRORS,
    openapi_extra=EMBEDDINGS_BODY,
)
async def embeddings(request: Request) -> Response:
    dataplane = _dataplane(request)

    async def parse() -> tuple[ServedModel, list[str], EmbeddingsRequest]:
        body = validate(EmbeddingsRequest, await read_json(request, dataplane.settings.max_body_bytes))
        model = dataplane.catalog.model_named(body.model)
        _check_embeddings(model, body)
        return model, body.batch, body

    return respond(await dataplane.infer(parse, _render_embeddings))


def _created(model: ServedModel) -> int:
    """When the version was built (its manifest's `build.created_at`, Unix seconds); 0 when that cannot be read."""
    try:
        return int(dt.datetime.fromisoformat(model.manifest.build.created_at).timestamp())
    except ValueError:
        return 0


def model_cards(catalog: Catalog) -> list[ModelCard]:
    """A card for each name `/v1/embeddings` accepts now: those whose every live version is an embedding model."""
    return [
        ModelCard(id=name, created=max(map(_created, versions)), owned_by=OWNER)
        for name, versions in catalog.models().items()
        if all(map(_embeds, versions))
    ]


def _json(payload: ModelList | ModelCard) -> Response:
    return Response(payload.model_dump_json(), media_type="application/json")


@router.get(
    paths.MODELS,
    summary="OpenAI-compatible list of the models /v1/embeddings accepts",
    responses=ok(ModelList, "The models") | errors(401),
)
async def list_models(request: Request) -> Response:
    return _json(ModelList(data=model_cards(_dataplane(request).catalog)))


@router.get(
    paths.MODEL,
    summary="OpenAI-compatible description of one model /v1/embeddings accepts",
    responses=ok(ModelCard, "The model") | errors(401, 404),
)
async def retrieve_model(request: Request, model: str = MODEL) -> Response:
    cards = model_cards(_dataplane(request).catalog)
    found = next((card for card in cards if card.id == model), None)
    if found is None:
        served = ", ".join(f"'{card.id}'" for card in cards) or "none"
        raise NotFound(f"no embedding model '{model}'; this server's models: {served}")
    return _json(found)


@router.get(paths.HEALTH_LIVE, summary="The process is up")
async def live() -> dict:
    return {"status": "alive"}


@router.get(
    paths.HEALTH_READY, summary="The model is loaded, warmed up and its backend answers", responses=OK | NOT_READY
)
async def ready(request: Request) -> JSONResponse:
    dataplane = _dataplane(request)
    ok = await dataplane.is_ready()
    catalog = dataplane.catalog
    body: dict[str, Any] = {"status": "ready" if ok else "not ready", "endpoints": catalog.names()}
    if config_errors := catalog.errors():
        body["config_errors"] = config_errors  # the valid endpoints are served; these are not
    body |= catalog.health()  # e.g. the deployment state store unreachable: the last state serves on
    if catalog.builtin:
        model = catalog.builtin.model
        body |= {"model": model.manifest.name, "version": model.version, "device": model.backend.device}
    return JSONResponse(body, status_code=200 if ok else 503, headers=None if ok else {"Retry-After": "1"})


@router.get(
    paths.METRICS,
    summary="Prometheus metrics, merged over all workers",
    responses=errors(401),
    response_class=PlainTextResponse,
)
async def prometheus_metrics() -> Response:
    payload, content_type = metrics_payload()
    return Response(payload, media_type=content_type)
