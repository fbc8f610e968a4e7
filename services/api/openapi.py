"""What the OpenAPI document declares beyond FastAPI's defaults: the request bodies the raw-body routes read, and
the error responses the services really give (every error is `{"error": {...}}`, `services.common.errors`). The
fuzz tests (schemathesis) hold the servers to it."""

from __future__ import annotations

from typing import Any

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


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
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


def json_body(model: type[BaseModel]) -> dict:
    schema = inline(model.model_json_schema())
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


INFERENCE_ERRORS = errors(400, 401, 404, 413, 422, 429, 500, 503, 504)
SERVE_BODY = json_body(ServeRequest)
EMBEDDINGS_BODY = json_body(EmbeddingsRequest)
V2_BODY = json_body(V2InferenceRequest)
OK = {200: {"model": Open, "description": "The answer"}}
NOT_READY = {503: {"model": Open, "description": "Not ready yet (Retry-After)"}}
