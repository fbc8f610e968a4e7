"""One error hierarchy for every service.

Each error carries its HTTP status and error type; the HTTP edge maps them once (`services.api.errors`). Core
code raises these and never builds HTTP responses itself.
"""

from __future__ import annotations


class ServingError(Exception):
    """Base class: a failure with a status code and a message that tells the caller what to do."""

    status_code: int = 500
    error_type: str = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after = retry_after

    def to_dict(self) -> dict:
        body = {"message": self.message, "type": self.error_type, "code": self.status_code}
        if self.param is not None:
            body["param"] = self.param
        return {"error": body}


class BadRequest(ServingError):
    """The body cannot be read at all: malformed JSON, not UTF-8."""

    status_code = 400
    error_type = "bad_request"


class InvalidInput(ServingError):
    """The body was read but a field is missing, of the wrong type or out of range."""

    status_code = 422
    error_type = "invalid_input"


class Unauthorized(ServingError):
    """No valid credentials: send `Authorization: Bearer <token>`."""

    status_code = 401
    error_type = "unauthorized"


class Conflict(ServingError):
    """The request contradicts the current state (e.g. a canary over a version that was rejected)."""

    status_code = 409
    error_type = "conflict"


class PayloadTooLarge(ServingError):
    status_code = 413
    error_type = "payload_too_large"


class NotFound(ServingError):
    status_code = 404
    error_type = "not_found"


class Unavailable(ServingError):
    """A dependency (model not loaded yet, Triton down, Triton queue full): retry later."""

    status_code = 503
    error_type = "unavailable"


class Overloaded(ServingError):
    """This worker is at its bound of requests in flight: retry after Retry-After, or add workers."""

    status_code = 429
    error_type = "overloaded"


class DeadlineExceeded(ServingError):
    status_code = 504
    error_type = "deadline_exceeded"


class ModelBuildError(ServingError):
    """The model export or its validation failed."""

    error_type = "model_build_error"


class ConfigurationError(ServingError):
    """A setting, manifest or config file is wrong; raised at startup, never per request."""

    error_type = "configuration_error"
