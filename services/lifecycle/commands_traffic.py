"""`serving model auto-update|canary|rollout|redeploy|remove`: change a deployed endpoint through the admin API.

The commands only ask; the controller (`serving controller`) and the gateway's workers act on the deployment state
the admin API writes."""

from __future__ import annotations

import typer

from services.lifecycle.commands_common import TOKEN, URL, AdminApi, endpoint_path, fail, print_json
from services.lifecycle.commands_list import measured_rates
from services.lifecycle.deployments import RolloutPolicy
from services.lifecycle.rollout_plan import plan


def auto_update(
    endpoint: str = typer.Argument(..., help="Endpoint: served at /serve/ENDPOINT."),
    name: str = typer.Option(..., "--name", help="Registered model whose new versions are deployed."),
    max_versions: int = typer.Option(2, min=1, help="Live versions kept; older ones are drained and unloaded."),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Deploy every new registry version of a model to ENDPOINT (the controller loads, checks, then serves it)."""
    body = {"name": name, "max_versions": max_versions}
    print_json(AdminApi.for_command(url, token).call("PUT", endpoint_path(endpoint, "auto-update"), body))


def canary(
    endpoint: str = typer.Argument(...),
    weights: list[float] = typer.Option(..., "--weights", help="One weight per version: --weights 0.1 0.9."),
    versions: list[str] = typer.Option(
        None, "--versions", help="The versions, in the order of the weights: --versions 2 1."
    ),
    newest: int = typer.Option(None, "--newest", help="Or: the newest N live versions, newest first."),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Split ENDPOINT's traffic by weight (send `x-canary-key` to keep a caller on one version). An option may also
    be repeated: --weights 0.1 --weights 0.9."""
    if versions and len(versions) != len(weights):
        fail(f"--versions has {len(versions)} values and --weights {len(weights)}: give one weight per version")
    body = {"weights": weights, "versions": versions or None, "newest": newest}
    print_json(AdminApi.for_command(url, token).call("PUT", endpoint_path(endpoint, "canary"), body))


def _default(field: str):
    """The policy's one default of `field` (`RolloutPolicy`), shown in the option's help."""
    return RolloutPolicy.model_fields[field].get_default(call_default_factory=True)


def rollout(
    endpoint: str = typer.Argument(...),
    version: str = typer.Option(..., "--version"),
    steps: str = typer.Option(
        ",".join(map(str, _default("steps"))), help="Traffic percentages for the new version, step by step."
    ),
    dwell: float = typer.Option(_default("dwell"), help="Seconds each step lasts at least before it is judged."),
    max_error_rate: float = typer.Option(
        _default("max_error_rate"), help="Roll back when the new version's 5xx rate is significantly above this."
    ),
    max_p99_ratio: float = typer.Option(
        _default("max_p99_ratio"), help="Roll back when its p99 is significantly above this times the stable one's."
    ),
    min_requests: int = typer.Option(
        _default("min_requests"), help="Requests each version must answer in a step before the step passes."
    ),
    max_wait: float = typer.Option(
        _default("max_wait"), help="Seconds a step may wait past its dwell for them; then it rolls back, unjudged."
    ),
    significance: float = typer.Option(
        _default("significance"), help="A breach rolls back when its one-sided test's p-value is below this."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print what would be judged, at today's traffic; start nothing."
    ),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Move ENDPOINT's traffic to VERSION step by step; a breach rolls back at once.

    Each step is judged once both versions answered --min-requests (docs/lifecycle.md, "Canary and progressive
    rollout"); `serving model list ENDPOINT` says where the rollout stands and what a step waits for. When the
    endpoint follows a registered model (auto-update), the registry version is tagged with the outcome and, on
    success, given the `champion` alias."""
    try:
        percentages = [int(step) for step in steps.split(",")]
    except ValueError:
        fail(f"--steps takes comma-separated percentages such as 10,50,100, not '{steps}'")
    body = {
        "version": version,
        "steps": percentages,
        "dwell": dwell,
        "max_error_rate": max_error_rate,
        "max_p99_ratio": max_p99_ratio,
        "min_requests": min_requests,
        "max_wait": max_wait,
        "significance": significance,
        "dry_run": dry_run,
    }
    api = AdminApi.for_command(url, token)
    answer = api.call("POST", endpoint_path(endpoint, "rollout"), body)
    if not dry_run:
        print_json(answer)
        return
    rate = sum(v["requests_per_second"] for e in measured_rates(api, endpoint) for v in e["versions"])
    print("\n".join(plan(answer["rollout"], rate)))


def remove(
    endpoint: str = typer.Argument(...),
    version: str = typer.Option(..., "--version"),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Take VERSION out of traffic; the controller unloads it once its drain period is over.

    The drain period (CONTROLLER_DRAIN_SECONDS) is meant to outlast the requests already in flight."""
    print_json(AdminApi.for_command(url, token).call("DELETE", endpoint_path(endpoint, "versions", version)))


def redeploy(
    endpoint: str = typer.Argument(...),
    version: str = typer.Option(..., "--version"),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Deploy again a VERSION that was rejected (by a deployment check or a rollout) or removed.

    The controller fetches, checks and loads it as a new version; once live it gets traffic by the endpoint's policy
    (`serving model list` says why each version gets its share)."""
    print_json(AdminApi.for_command(url, token).call("POST", endpoint_path(endpoint, "versions", version, "redeploy")))
