"""Endpoint and model names: one rule, checked at every door a name comes in by (the `serving endpoints`,
`serving metrics` and `serving model` commands, the admin API's path parameters, the endpoint file's entries).

A name becomes a directory of Triton's model repository (`models_dir/NAME/VERSION`), a path segment of
`/serve/NAME` and a label of every metric, so it is held to what all three accept: Kubernetes' DNS subdomain names
(lowercase letters, digits, '-' and '.', starting and ending with a letter or digit; no '..') with '_' added, which
Triton's and clearml-serving's names commonly use, and at most 63 characters. Lowercase only, so that two names
never share a directory on a case-insensitive file system.
"""

from __future__ import annotations

import re

from pydantic_core import PydanticCustomError

from services.common.errors import InvalidInput

NAME_MAX_LENGTH = 63
NAME_PATTERN = r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9_-]*[a-z0-9])?)*$"
"""Dot-separated labels, each starting and ending with a letter or digit: no '..', no leading or trailing '.', no
'/'. No look-arounds, so pydantic's and FastAPI's pattern checks (Rust's regex engine) take it as it is."""
_NAME = re.compile(NAME_PATTERN)
RULE = (
    f"1 to {NAME_MAX_LENGTH} lowercase letters, digits, '-', '_' or '.', starting and ending with a letter or digit, "
    f"no '..' (pattern {NAME_PATTERN})"
)


def is_valid_name(name: object) -> bool:
    """The length is checked first, so the pattern never runs on a long input."""
    return isinstance(name, str) and 0 < len(name) <= NAME_MAX_LENGTH and _NAME.fullmatch(name) is not None


def check_name(name: str, what: str = "endpoint") -> str:
    """`name` if it is valid, else InvalidInput (422) saying the rule."""
    if not is_valid_name(name):
        raise InvalidInput(_refusal(name, what), param=what)
    return name


def validated_name(name: str) -> str:
    """`check_name` as a pydantic validator (`AfterValidator`): the same rule and message, as a validation error,
    so FastAPI refuses a path parameter with it before the route runs."""
    if not is_valid_name(name):
        raise PydanticCustomError("invalid_name", _refusal(name, "endpoint").replace("{", "{{").replace("}", "}}"))
    return name


def _refusal(name: object, what: str) -> str:
    return f"{what} name {shown(name)} is not valid: use {RULE}"


def printable(name: object, limit: int = 40) -> str:
    """A name as a message, a log line or a JSON key may carry it: control characters escaped, long names cut (a
    name from a caller never breaks a log line nor fills one)."""
    text = str(name)
    cut = text[:limit] if text[:limit].isprintable() else repr(text[:limit])[1:-1]
    return cut + (f"... ({len(text)} characters)" if len(text) > limit else "")


def shown(name: object) -> str:
    """`printable(name)` in quotes, for a sentence."""
    return f"'{printable(name)}'"


TENSOR_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,127}$"
"""A tensor name: what Triton, ONNX and TensorFlow exports use (`input_ids`, `INPUT__0`, `serving_default_x:0`), at
most 128 characters; no quote, brace, space or newline."""
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""A model's own name in its manifest (`all-MiniLM-L6-v2`)."""
ARTIFACT_FILE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9][A-Za-z0-9._-]{0,127}){0,7}$"
"""A file inside a model artifact: a relative path of at most 8 segments, each starting with a letter or digit (so
never absolute, never `..`, never hidden)."""


REGISTERED_NAME_MAX_LENGTH = 256
"""The longest registered model name MLflow's stores keep (its `registered_models.name` column)."""
REGISTERED_RULE = (
    f"1 to {REGISTERED_NAME_MAX_LENGTH} printable characters, no '/' or ':', not '.' or '..' nor a path with such a "
    "segment (MLflow's rule for a registered model name), no leading or trailing space"
)


def is_valid_registered_name(name: object) -> bool:
    """MLflow's rule for a registered model name (not blank, no '/' or ':', a normalised path of one segment), held
    to printable characters and MLflow's length: the name goes into filter strings, log lines and pages."""
    if not isinstance(name, str) or not 0 < len(name) <= REGISTERED_NAME_MAX_LENGTH:
        return False
    if not name.isprintable() or name != name.strip() or any(c in name for c in "/:\\"):
        return False
    return name not in (".", "..")


def check_registered_name(name: str, what: str = "registered model") -> str:
    """`name` if it is a valid registered model name, else InvalidInput (422) saying the rule."""
    if not is_valid_registered_name(name):
        raise InvalidInput(_registered_refusal(name, what), param="name")
    return name


def validated_registered_name(name: str) -> str:
    """`check_registered_name` as a pydantic validator (`AfterValidator`): the same rule and message, as a validation
    error, so FastAPI refuses a body field with it before the route runs."""
    if not is_valid_registered_name(name):
        message = _registered_refusal(name, "registered model")
        raise PydanticCustomError("invalid_registered_name", message.replace("{", "{{").replace("}", "}}"))
    return name


def _registered_refusal(name: object, what: str) -> str:
    return f"{what} name {shown(name)} is not valid: use {REGISTERED_RULE}"


VERSION_MAX_DIGITS = 9
"""A registry version number: MLflow counts from 1; nine digits is a billion versions of one model."""
VERSION_PATTERN = rf"^[1-9][0-9]{{0,{VERSION_MAX_DIGITS - 1}}}$"
"""A registry version as a key and a directory name: a positive integer without sign, spaces or leading zeros."""
_VERSION = re.compile(VERSION_PATTERN)


def is_valid_version(version: object) -> bool:
    return isinstance(version, str) and _VERSION.fullmatch(version) is not None
