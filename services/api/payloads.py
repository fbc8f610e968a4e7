"""The JSON of `/serve`, this API's own protocol: the answer of a text model for each task (embeddings, classifier
labels and scores), the body a pipeline's preprocess code receives, and its answer serialised as clearml-serving's
users return it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from services.api.body import parse_json
from services.common.backend import ServedModel
from services.common.errors import BadRequest, InvalidInput
from services.common.outputs import classify

if TYPE_CHECKING:
    from services.api.predictor import Prediction


def model_payload(model: ServedModel, prediction: Prediction, single: bool) -> dict:
    """The answer to `{"text": ...}` (`single`: one result, flat) or `{"texts": [...]}` (lists, in request order)."""
    outputs, token_counts, truncated = prediction.outputs, prediction.token_counts, prediction.truncated
    manifest = model.manifest
    payload: dict = {"model": manifest.name, "version": model.version}
    if manifest.task == "classification":
        results = classify(manifest, outputs)
        if single:
            payload.update(results[0])
        else:
            payload["predictions"] = results
    elif single:
        payload["embedding"] = outputs[0]
    else:
        payload["embeddings"] = outputs
    if single:
        payload["tokens"] = token_counts[0]
        payload["truncated"] = truncated[0]
    else:
        payload["tokens"] = token_counts
        payload["truncated"] = truncated
    return payload


def dumps(payload: dict) -> bytes:
    """A payload of this API (numpy arrays included) as JSON."""
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


def pipeline_body(raw: bytes, content_type: str | None) -> Any:
    """What clearml-serving's route hands to `preprocess` (FastAPI with a `bytes | dict` body): the parsed JSON for a
    JSON content type (`application/json`, `application/*+json`) or none at all, the raw bytes for any other one
    (images, audio, protobuf, and curl's default `application/x-www-form-urlencoded` too)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    main, _, sub = kind.partition("/")
    if kind and not (main == "application" and (sub == "json" or sub.endswith("+json"))):
        return raw
    try:
        if not raw:
            raise BadRequest("empty request body: send the JSON the endpoint's preprocess reads")
        return parse_json(raw)
    except BadRequest as exc:
        if kind:
            raise
        raise BadRequest(
            f"{exc.message}; a body without a Content-Type is read as JSON: send JSON, or name the body's type "
            "(e.g. -H 'Content-Type: application/octet-stream') to have preprocess get the raw bytes"
        ) from None


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
    """A pipeline's answer as JSON; what JSON cannot carry is the caller's 422 naming the endpoint's postprocess."""
    try:
        return orjson.dumps(result, default=_jsonable, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise InvalidInput(
            f"postprocess of endpoint '{endpoint}' returned what JSON cannot carry ({exc}): return dicts with string, "
            "number, boolean or None keys, and lists, numbers, strings and numpy arrays as values",
            param="postprocess",
        ) from None
