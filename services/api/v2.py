"""Open Inference Protocol (KServe v2) on every HTTP stack, so Triton/KServe clients (`tritonclient.http`) can call
it as if it were Triton, with the endpoint name as the model name: TEXT (BYTES) in, the model's contract output out.
JSON and the binary tensor extension (`Inference-Header-Content-Length`) both work, the way tritonclient sends them
by default."""

from __future__ import annotations

from importlib.metadata import version as package_version

import numpy as np
import orjson
from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from tritonclient.utils import deserialize_bytes_tensor

from services.api import paths
from services.api.body import read_body
from services.api.dataplane import DataPlane, Prediction
from services.api.openapi import INFERENCE_ERRORS, NOT_READY, OK, V2_BODY, errors
from services.common.backend import ServedModel
from services.common.errors import BadRequest, InvalidInput

router = APIRouter(prefix=paths.V2)
MODEL = Path(description="The endpoint's name (the model name of the protocol)", examples=["minilm"])
TEXT = "TEXT"


def _dataplane(request: Request) -> DataPlane:
    return request.app.state.dataplane


def _model(request: Request, model: str, version: str | None) -> tuple[DataPlane, ServedModel]:
    """The model version that `model` (an endpoint name) and `version` (if given) name; else 404."""
    dataplane = _dataplane(request)
    return dataplane, dataplane.catalog.model_for(model, version)


def _json(payload: dict, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def split_body(raw: bytes, header_length: str | None) -> tuple[dict, bytes]:
    """The JSON header and the binary tail of an inference request."""
    if header_length is None:
        header, blob = raw, b""
    else:
        if not header_length.isdigit() or int(header_length) > len(raw):
            raise BadRequest("Inference-Header-Content-Length does not fit the body")
        header, blob = raw[: int(header_length)], raw[int(header_length) :]
    try:
        request = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON: {exc}") from None
    if not isinstance(request, dict):
        raise InvalidInput("the inference request must be a JSON object")
    return request, blob


def texts_from_request(request: dict, blob: bytes) -> list[str]:
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidInput("'inputs' must be a non-empty list", param="inputs")
    offset = 0
    texts = None
    for tensor in inputs:
        if not isinstance(tensor, dict):
            raise InvalidInput("each input must be an object", param="inputs")
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(blob):
                raise InvalidInput("binary_data_size must be a whole number of bytes within the body", param="inputs")
            chunk, offset = blob[offset : offset + size], offset + size
        if tensor.get("name") != TEXT:
            raise InvalidInput(f"unexpected input '{tensor.get('name')}'; this model takes '{TEXT}'", param="inputs")
        if tensor.get("datatype") != "BYTES":
            raise InvalidInput(f"input '{TEXT}' must be BYTES, not {tensor.get('datatype')}", param="inputs")
        if size is not None:
            values = deserialize_bytes_tensor(chunk)
            texts = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]
        else:
            data = tensor.get("data")
            if not isinstance(data, list) or not all(isinstance(v, str) for v in np.ravel(data).tolist()):
                raise InvalidInput(f"input '{TEXT}' data must be a list of strings", param="inputs")
            texts = [str(v) for v in np.ravel(data).tolist()]
        shape = tensor.get("shape")
        if not isinstance(shape, list) or int(np.prod(shape)) != len(texts):
            raise InvalidInput(f"input '{TEXT}' shape {shape} does not match its {len(texts)} values", param="inputs")
    if texts is None:
        raise InvalidInput(f"missing input '{TEXT}'", param="inputs")
    return texts


def wants_binary(request: dict, name: str) -> bool:
    for output in request.get("outputs") or []:
        if output.get("name") == name:
            return bool((output.get("parameters") or {}).get("binary_data", False))
    return bool((request.get("parameters") or {}).get("binary_data_output", False))


def _metadata(dataplane: DataPlane, model: ServedModel) -> dict:
    output = model.manifest.output
    return {
        "name": model.endpoint,
        "versions": dataplane.catalog.resolve(model.endpoint).versions(),
        "platform": "transformer-serving",
        "inputs": [{"name": TEXT, "datatype": "BYTES", "shape": [-1, 1]}],
        "outputs": [{"name": output.name, "datatype": output.dtype, "shape": output.shape}],
    }


@router.get("")
async def server_metadata() -> Response:
    return _json(
        {
            "name": "transformer-serving",
            "version": package_version("transformer-serving"),
            "extensions": ["binary_tensor_data"],
        }
    )


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
    return _json(_metadata(*_model(request, model, version)))


@router.get("/models/{model}/ready", responses=OK | NOT_READY | errors(401, 404, 422))
@router.get("/models/{model}/versions/{version}/ready", responses=OK | NOT_READY | errors(401, 404, 422))
async def model_ready(request: Request, model: str = MODEL, version: str | None = None) -> Response:
    dataplane, _ = _model(request, model, version)
    ok = await dataplane.is_ready()
    return _json({"name": model, "ready": ok}, 200 if ok else 503)


def _render(model: ServedModel, prediction: Prediction, body: dict) -> Response:
    """The contract output as one tensor: JSON data, or binary after the JSON header when the request asks."""
    output = model.manifest.output
    array = prediction.outputs.astype(output.numpy_dtype, copy=False)
    entry = {"name": output.name, "datatype": output.dtype, "shape": list(array.shape)}
    payload = {"model_name": model.endpoint, "model_version": model.version, "outputs": [entry]}
    if "id" in body:
        payload["id"] = body["id"]
    if wants_binary(body, output.name):
        raw_out = np.ascontiguousarray(array).tobytes()
        entry["parameters"] = {"binary_data_size": len(raw_out)}
        header = orjson.dumps(payload)
        return Response(
            header + raw_out,
            media_type="application/octet-stream",
            headers={"Inference-Header-Content-Length": str(len(header))},
        )
    entry["data"] = array.ravel()
    return Response(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


@router.post(paths.V2_INFER, responses=OK | INFERENCE_ERRORS, openapi_extra=V2_BODY)
@router.post(paths.V2_VERSION_INFER, responses=OK | INFERENCE_ERRORS, openapi_extra=V2_BODY)
async def infer(request: Request, model: str = MODEL, version: str | None = None) -> Response:
    dataplane, served = _model(request, model, version)  # a 404 before the body is read

    async def parse() -> tuple[ServedModel, list[str], dict]:
        raw = await read_body(request.stream(), request.headers, dataplane.settings.max_body_bytes)
        body, blob = split_body(raw, request.headers.get("inference-header-content-length"))
        return served, texts_from_request(body, blob), body

    return await dataplane.infer(parse, _render)
