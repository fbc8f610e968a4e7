"""The rollout policy's options, shared by `serving model rollout` and `serving model auto-update --rollout`: one
help text each, and each default the policy's own (`RolloutPolicy`)."""

from __future__ import annotations

from typing import Any

import typer

from services.common.cli import fail
from services.lifecycle.deployments import RolloutPolicy

HELP = {
    "steps": "Traffic percentages for the new version, step by step.",
    "dwell": "Seconds each step lasts at least before it is judged.",
    "max_error_rate": "Roll back when the new version's 5xx rate is significantly above this.",
    "max_p99_ratio": "Roll back when its p99 is significantly above this times the stable one's.",
    "min_requests": "Requests each version must answer in a step before the step passes.",
    "max_wait": "Seconds a step may wait past its dwell for them; then it rolls back, unjudged.",
    "significance": "A breach rolls back when its one-sided test's p-value is below this.",
}


def default(field: str) -> str | int | float:
    """The policy's default of `field`, as the option takes it (steps as text: 10,50,100)."""
    value = RolloutPolicy.model_fields[field].get_default(call_default_factory=True)
    return ",".join(map(str, value)) if field == "steps" else value


def option(field: str, unset: bool = False) -> Any:
    """The option for `field`; `unset`: None unless given (the policy's default is named in the help)."""
    if unset:
        return typer.Option(None, help=f"{HELP[field]} [default: {default(field)}]")
    return typer.Option(default(field), help=HELP[field])


def policy_body(**given: str | float | None) -> dict:
    """The policy fields given (None: left to the policy's default), --steps parsed into percentages."""
    body: dict[str, Any] = {field: value for field, value in given.items() if value is not None}
    if "steps" in body:
        try:
            body["steps"] = [int(step) for step in body["steps"].split(",")]
        except ValueError:
            fail(f"--steps takes comma-separated percentages such as 10,50,100, not '{given['steps']}'")
    return body
