"""`serving model auto-update|canary|rollout|remove`: change a deployed endpoint through the gateway's admin API.

The commands only ask; the controller (`serving controller`) and the gateway's workers act on the deployment state
the admin API writes."""

from __future__ import annotations

import typer

from services.lifecycle.commands_common import TOKEN, URL, AdminApi, endpoint_path, fail, print_json


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


def rollout(
    endpoint: str = typer.Argument(...),
    version: str = typer.Option(..., "--version"),
    steps: str = typer.Option("10,50,100", help="Traffic percentages for the new version, step by step."),
    dwell: float = typer.Option(60, help="Seconds at each step before it is judged."),
    max_error_rate: float = typer.Option(0.01, help="Roll back when the new version's 5xx rate is above this."),
    max_p99_ratio: float = typer.Option(1.5, help="Roll back when its p99 is above this times the stable one's."),
    min_requests: int = typer.Option(20, help="Requests a version must answer in a step before it is judged."),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Move ENDPOINT's traffic to VERSION step by step; a breach rolls back at once.

    When the endpoint follows a registered model (auto-update), the registry version is tagged with the outcome and,
    on success, given the `champion` alias."""
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
    }
    print_json(AdminApi.for_command(url, token).call("POST", endpoint_path(endpoint, "rollout"), body))


def remove(
    endpoint: str = typer.Argument(...),
    version: str = typer.Option(..., "--version"),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Take VERSION out of traffic; the controller unloads it once its drain period is over.

    The drain period (CONTROLLER_DRAIN_SECONDS) is meant to outlast the requests already in flight."""
    print_json(AdminApi.for_command(url, token).call("DELETE", endpoint_path(endpoint, "versions", version)))
