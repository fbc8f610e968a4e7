"""Open Inference Protocol (KServe v2) on every HTTP stack, so Triton/KServe clients (`tritonclient.http`) can call
it as if it were Triton, with the endpoint name as the model name: TEXT (BYTES) in, the model's contract output out.
JSON and the binary tensor extension (`Inference-Header-Content-Length`) both work, the way tritonclient sends them
by default. A request is read and checked whole (`v2_request`) before the data plane runs anything."""

from __future__ import annotations

from importlib.metadata import version as package_version
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter, Path, Request
from fastapi.responses import Response

from services.api import paths
from services.api.body import read_body
from services.api.dataplane import DataPlane, Prediction
from services.api.openapi import INFERENCE_ERRORS, NOT_READY, OK, V2_ANSWER, V2_BODY, errors
from services.api.v2_request import HEADER_LENGTH, parse_inference
from services.common.backend import ServedModel
from services.common.devices import HEADER as DEVICE_HEADER
from services.common.schemas import V2_DATATYPE, V2_INPUT, V2InferenceRequest

router = APIRouter(prefix=paths.V2)
MODEL = Path(description="The endpoint's name (the model name of the protocol)", examples=["minilm"])


def _dataplane(request: Request) -> DataPlane:
    return request.app.state.dataplane


def _model(request: Request, model: str, version: str | None) -> tuple[DataPlane, ServedModel]:
    """The model version that `model` (an endpoint name) and `version` (if given) name; else 404."""
    dataplane = _dataplane(request)
    return dataplane, dataplane.catalog.model_for(model, version)


def _json(payload: dict, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def model_metadata_of(dataplane: DataPlane, model: ServedModel) -> dict:
    """The model's metadata, as both edges of the protocol (HTTP here, gRPC in `v2_grpc`) answer it."""
    output = model.manifest.output
    return {
        "name": model.endpoint,
        "versions": dataplane.catalog.model_endpoint(model.endpoint).versions(),
        "platform": "transformer-serving",
        "inputs": [{"name": V2_INPUT, "datatype": V2_DATATYPE, "shape": [-1, 1]}],
        "outputs": [{"name": output.name, "datatype": output.dtype, "shape": output.shape}],
        "parameters": {"device": model.backend.device},
    }


def server_metadata_of() -> dict:
    return {
        "name": "transformer-serving",
        "version": package_version("transformer-serving"),
        "extensions": ["binary_tensor_data"],
    }


@router.get("")
async def server_metadata() -> Response:
    return _json(server_metadata_of())


@router.get("/health/live")
async def live() -> Response:
    return _json({"live": True})


@router.get("/health/ready", responses=OK | NOT_READY)
async def ready(request: Request) -> Response:
    dataplane = _dataplane(request)
    ok = await dataplane.is_ready()
    return _json({"ready": ok}, 200 if ok else 503)


@router.get("/models/{model}", responses=OK | errors(401, 404, 422))
@router.get("/models/{model}/versions/{version}", responses=OK | errors(401, 404, 422))
async def model_metadata(request: Request, model: str = MODEL, version: str | None = None) -> Response:
    return _json(model_metadata_of(*_model(request, model, version)))


@router.get("/models/{model}/ready", responses=OK | NOT_READY | errors(401, 404, 422))
@router.get("/models/{model}/versions/{version}/ready", responses=OK | NOT_READY | errors(401, 404, 422))
async def model_ready(request: Request, model: str = MODEL, version: str | None = None) -> Response:
    dataplane, _ = _model(request, model, version)
    ok = await dataplane.is_ready()
    return _json({"name": model, "ready": ok}, 200 if ok else 503)


def _render(model: ServedModel, prediction: Prediction, request: V2InferenceRequest) -> Response:
    """The contract output as one tensor: JSON data, or binary after the JSON header when the request asks; the
    device it was computed on in `x-device`."""
    output = model.manifest.output
    array: np.ndarray = prediction.outputs.astype(output.numpy_dtype, copy=False)
    entry: dict[str, Any] = {"name": output.name, "datatype": output.dtype, "shape": list(array.shape)}
    payload: dict[str, Any] = {"model_name": model.endpoint, "model_version": model.version, "outputs": [entry]}
    if request.id is not None:
        payload["id"] = request.id
    if request.wants_binary(output.name):
        raw_out = np.ascontiguousarray(array).tobytes()
        entry["parameters"] = {"binary_data_size": len(raw_out)}
        header = orjson.dumps(payload)
        return Response(
            header + raw_out,
            media_type="application/octet-stream",
            headers={"Inference-Header-Content-Length": str(len(header)), DEVICE_HEADER: prediction.device},
        )
    entry["data"] = array.ravel()
    body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, media_type="application/json", headers={DEVICE_HEADER: prediction.device})


@router.post(paths.V2_INFER, responses=V2_ANSWER | INFERENCE_ERRORS, openapi_extra=V2_BODY)
@router.post(paths.V2_VERSION_INFER, responses=V2_ANSWER | INFERENCE_ERRORS, openapi_extra=V2_BODY)
async def infer(request: Request, model: str = MODEL, version: str | None = None) -> Response:
    dataplane, served = _model(request, model, version)  # a 404 before the body is read

    async def parse() -> tuple[ServedModel, list[str], V2InferenceRequest]:
        raw = await read_body(request.stream(), request.headers, dataplane.settings.max_body_bytes)
        inference = parse_inference(raw, request.headers.get(HEADER_LENGTH), served.manifest.output.name)
        return served, inference.texts, inference.request  # all checked: nothing has run yet

    return await dataplane.infer(parse, _render)
