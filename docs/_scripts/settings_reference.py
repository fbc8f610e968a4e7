"""Build-time generator (mkdocs-gen-files) of the settings tables of `reference/settings.md`: one per settings class,
a row per environment variable (`services.common.settings_env.variables`, the names `to_env` writes and the services
read), with its field, type, default and the field's docstring. The page's prose above them is written by hand."""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

import mkdocs_gen_files
from pydantic import BaseModel

from services.common.settings import ApiSettings, RunSettings
from services.common.settings_env import Variable, variables
from services.controller.settings import ControllerSettings
from services.gateway.settings import GatewaySettings
from services.launcher.settings import LogFileSettings, SupervisorSettings
from services.registry.settings import RegistrySettings
from services.replica.settings import AgentSettings

CLASSES = {
    ApiSettings: "read by both HTTP stacks: the FastAPI baseline (`STACK=fastapi`) and the gateway (`STACK=clearml`).",
    GatewaySettings: "the gateway's own (`STACK=clearml`), beside every `SERVING_` variable above; `SERVING_COALESCE`"
    " is listed again: its default is on here.",
    ControllerSettings: "the lifecycle controller.",
    RegistrySettings: "the registry commands and the controller.",
    AgentSettings: "`serving triton-agent`, beside each Triton replica.",
    SupervisorSettings: "the supervisor of a stack.",
    LogFileSettings: "the launcher: how the log of each process a stack runs in the background rotates.",
    RunSettings: "every entry point.",
}


def rows(cls: type[BaseModel]) -> list[Variable]:
    """The class's variables, nested groups by their fields; the gateway's without those it shares unchanged."""
    found = [v for v in variables(cls) if not _group(v.field.annotation)]
    if cls is GatewaySettings:
        shared = ApiSettings.model_fields
        found = [
            v
            for v in found
            if v.path[0] not in shared or (len(v.path) == 1 and _default(v) != _default_of(shared[v.path[0]]))
        ]
    return found


def table(cls: type[BaseModel]) -> str:
    lines = [
        f"## {cls.__name__} {{#{cls.__module__}.{cls.__name__}}}",
        "",
        f"`{cls.__module__}.{cls.__name__}`: {CLASSES[cls]}",
        "",
        "| variable | field | type | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for v in rows(cls):
        meaning = _cell(v.field.description or "")
        lines.append(f"| `{v.name}` | `{'.'.join(v.path)}` | {_type(v.field.annotation)} | {_default(v)} | {meaning} |")
    return "\n".join(lines) + "\n"


def _group(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _type(annotation: Any) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b(typing|pathlib|pydantic\.types)\.", "", text).replace("|", "\\|")


def _default(variable: Variable) -> str:
    return _default_of(variable.field)


def _default_of(field) -> str:
    if field.default_factory_takes_validated_data:
        return "under the run directory"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, PurePath):
        value = str(value)
    return _cell(f"`{value!r}`" if not isinstance(value, bool) else f"`{str(value).lower()}`")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


with mkdocs_gen_files.open("reference/settings.md", "a") as page:
    page.write("\n" + "\n".join(table(cls) for cls in CLASSES))
