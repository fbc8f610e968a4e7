"""What the OpenAPI document declares beyond FastAPI's defaults: the request bodies the raw-body routes read, with
examples that succeed when sent (the HTTP API reference shows them; a test sends each to a running server), and the
error responses the services really give (every error is `{"error": {...}}`, `services.common.errors`). The fuzz
tests (schemathesis) hold the servers to it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict

from services.common.schemas import EmbeddingsRequest, ServeRequest, V2InferenceRequest


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: int
    param: str | None = None
    request_id: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class Open(BaseModel):
    """A JSON object whose fields depend on the model or the endpoint's code."""

    model_config = ConfigDict(extra="allow")


DESCRIPTIONS = {
    400: "The body cannot be read: malformed JSON, not UTF-8, a bad gzip body",
    401: "No valid API key or admin token (`Authorization: Bearer ...`)",
    404: "No such endpoint, version or model; the message lists what is served",
    409: "The change contradicts the deployment state",
    413: "Body over the size limit (also once decompressed), or too many texts",
    422: "A field is missing, of the wrong type or out of range; or the endpoint's preprocess code failed",
    429: "This worker is at its in-flight bound: retry after Retry-After",
    500: "An unexpected error; the body has the request id the server log has it under",
    503: "A dependency is unavailable (Triton down or its queue full, model not ready): retry after Retry-After",
    504: "Triton did not answer within the deadline",
}


Responses = dict[int | str, dict[str, Any]]
"""What a route's `responses` takes: a description (and schema) by status code."""


def errors(*codes: int) -> Responses:
    return {code: {"model": ErrorBody, "description": DESCRIPTIONS[code]} for code in codes}


def inline(schema: dict) -> dict:
    """The schema with its `$defs` references resolved in place (the document of a raw-body route has no place
    to put them)."""
    definitions = schema.pop("$defs", {})

    def resolve(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    return resolve(schema)


def examples(named: dict[str, Any]) -> dict[str, dict]:
    """OpenAPI's named examples of a media type: each value is a request body as a client sends it."""
    return {name: {"summary": name, "value": value} for name, value in named.items()}


def json_body(model: type[BaseModel], named: dict[str, Any]) -> dict:
    """A raw-body route's request body: the model's schema and `named` examples (which the model accepts)."""
    for value in named.values():
        model.model_validate(value)
    schema = inline(model.model_json_schema())
    content = {"application/json": {"schema": schema, "examples": examples(named)}}
    return {"requestBody": {"required": True, "content": content}}


SERVE_EXAMPLES = {"one text": {"text": "hello world"}, "several texts": {"texts": ["hello world", "good morning"]}}
EMBEDDINGS_EXAMPLES = {
    "one text": {"input": "hello world"},
    "several texts, OpenAI's form": {"model": "minilm", "input": ["hello world", "good morning"]},
}
V2_EXAMPLES = {
    "one text": {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hello world"]}]},
    "two texts": {"inputs": [{"name": "TEXT", "shape": [2, 1], "datatype": "BYTES", "data": ["hello", "world"]}]},
}
ADMIN_EXAMPLES: dict[tuple[str, str], dict[str, Any]] = {
    ("PUT", "/admin/endpoints/{endpoint}/auto-update"): {
        "deploy each new version of a registered model": {"name": "sentiment", "max_versions": 2}
    },
    ("PUT", "/admin/endpoints/{endpoint}/canary"): {
        "10% to version 2, 90% to version 1": {"versions": ["2", "1"], "weights": [0.1, 0.9]},
        "the same over the two newest live versions": {"newest": 2, "weights": [0.1, 0.9]},
    },
    ("POST", "/admin/endpoints/{endpoint}/rollout"): {
        "version 2 in three steps": {
            "version": "2",
            "steps": [10, 50, 100],
            "dwell": 60,
            "max_error_rate": 0.01,
            "max_p99_ratio": 1.5,
        }
    },
}
"""The admin API's request examples, each for an endpoint whose versions 1 and 2 are live."""


def with_examples(router: APIRouter, named: dict[tuple[str, str], dict[str, Any]]) -> APIRouter:
    """`router` with `named` examples (by method and path) added to its routes' JSON request bodies, the routes of
    the routers it includes too."""
    for route in routes_of(router):
        for (method, path), found in named.items():
            if method in (route.methods or ()) and path == route.path:
                body = {"content": {"application/json": {"examples": examples(found)}}}
                route.openapi_extra = (route.openapi_extra or {}) | {"requestBody": body}
    return router


def routes_of(router: APIRouter) -> list[APIRoute]:
    """The API routes of `router` and of the routers it includes."""
    found = []
    for route in router.routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif (included := getattr(route, "original_router", None)) is not None:
            found += routes_of(included)
    return found


INFERENCE_ERRORS = errors(400, 401, 404, 413, 422, 429, 500, 503, 504)
SERVE_BODY = json_body(ServeRequest, SERVE_EXAMPLES)
EMBEDDINGS_BODY = json_body(EmbeddingsRequest, EMBEDDINGS_EXAMPLES)
V2_BODY = json_body(V2InferenceRequest, V2_EXAMPLES)


def ok(model: type, description: str) -> Responses:
    """A 200 answer of `model`'s schema."""
    return {200: {"model": model, "description": description}}


OK = ok(Open, "The answer")
V2_ANSWER: Responses = {
    200: {
        "model": Open,
        "description": "The answer: JSON, or with `binary_data_output` the binary tensor extension (a JSON header of "
        "`Inference-Header-Content-Length` bytes followed by the raw output tensor)",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}
NOT_READY: Responses = {503: {"model": Open, "description": "Not ready yet (Retry-After)"}}
