"""The environment names of a settings class, and a settings object written as a child process's environment.

A field's name is its schema's own: its validation alias when it has one (the first of an `AliasChoices`), else the
class's `env_prefix` and the field name in upper case; a nested group's fields add `__` and their own names
(`SERVING_OBSERVABILITY__LOG_JSON`). pydantic-settings matches names without regard to case."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePath
from typing import Any, Protocol, TypeGuard

from pydantic import AliasChoices, BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

NESTED = "__"


class _NameOf(Protocol):
    """A field's name -> the name of the variable that sets it."""

    def __call__(self, field: str, /) -> str: ...


@dataclass(frozen=True)
class Variable:
    """One environment variable a settings class reads: its name and the field behind it."""

    name: str
    path: tuple[str, ...]
    """Field names from the settings class down (`("observability", "log_json")`)."""
    field: FieldInfo


def env_name(settings_cls: type[BaseSettings], field: str) -> str:
    """The variable that sets `field` of `settings_cls` (a top-level field)."""
    alias = settings_cls.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        alias = alias.choices[0]
    if isinstance(alias, str):
        return alias
    return f"{settings_cls.model_config.get('env_prefix', '')}{field}".upper()


def variables(settings_cls: type[BaseSettings]) -> Iterator[Variable]:
    """Every variable `settings_cls` reads: each field's, and for a nested group each of its fields' as well (the
    group's own name takes the whole group as JSON)."""
    for field, info in settings_cls.model_fields.items():
        name = env_name(settings_cls, field)
        yield Variable(name, (field,), info)
        if _group(info.annotation):
            yield from _nested(name, (field,), info.annotation)


def _nested(prefix: str, path: tuple[str, ...], model: type[BaseModel]) -> Iterator[Variable]:
    for field, info in model.model_fields.items():
        name = f"{prefix}{NESTED}{field.upper()}"
        yield Variable(name, (*path, field), info)
        if _group(info.annotation):
            yield from _nested(name, (*path, field), info.annotation)


def to_env(settings: BaseSettings) -> dict[str, str]:
    """The variables that give a child process `settings`' explicitly set fields (`model_fields_set`: those passed to
    `model_validate` and those read from this process's environment, which a child inherits anyway), by their schema
    names. Lists and dicts are JSON, booleans `true`/`false`, paths and numbers `str`, secrets their value; a field
    set to None whose default is None is left out (unset is None)."""
    return dict(_set_fields(settings, lambda field: env_name(type(settings), field)))


def _set_fields(model: BaseModel, name_of: _NameOf) -> Iterator[tuple[str, str]]:
    for field in sorted(model.model_fields_set):
        value = getattr(model, field)
        name = name_of(field)
        if isinstance(value, BaseModel) and _group(type(value)):
            yield from _set_fields(value, lambda sub, name=name: f"{name}{NESTED}{sub.upper()}")
        elif value is None:
            if type(model).model_fields[field].default is not None:
                raise ValueError(f"{name} cannot be set to None through the environment")
        else:
            yield name, _text(value)


def _group(annotation: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | dict):
        return json.dumps(_plain(value))
    plain = _plain(value)
    return plain if isinstance(plain, str) else str(plain)


def _plain(value: Any) -> Any:
    """`value` as JSON's types: secrets revealed, paths and enums by their text or value."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, BaseModel):
        return {field: _plain(getattr(value, field)) for field in value.model_fields_set}
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(item) for item in value]
    return value
