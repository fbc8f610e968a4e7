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
from services.common.errors import InvalidInput
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
    """A pipeline's answer as JSON; what JSON cannot carry is the caller's 422 naming the endpoint's postprocess."""
    try:
        return orjson.dumps(result, default=_jsonable, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise InvalidInput(
            f"postprocess of endpoint '{endpoint}' returned what JSON cannot carry: {exc}", param="postprocess"
        ) from None
