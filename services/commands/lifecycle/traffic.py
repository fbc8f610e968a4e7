"""`serving model auto-update|canary|rollout|redeploy|remove`: change a deployed endpoint through the admin API.

The commands only ask; the controller (`serving controller`) and the gateway's workers act on the deployment state
the admin API writes."""

from __future__ import annotations

import typer

from services.commands.lifecycle.common import (
    TOKEN,
    URL,
    AdminApi,
    endpoint_path,
    print_json,
    registered_name,
)
from services.commands.lifecycle.listing import measured_rates
from services.commands.lifecycle.policy import option, policy_body
from services.common.cli import console, fail
from services.lifecycle.rollouts.plan import plan


def auto_update(
    endpoint: str = typer.Argument(..., help="Endpoint: served at /serve/ENDPOINT."),
    name: str = typer.Option(..., "--name", help="Registered model whose new versions are deployed."),
    max_versions: int = typer.Option(2, min=1, help="Live versions kept; older ones are drained and unloaded."),
    with_rollout: bool = typer.Option(
        False, "--rollout", help="Roll each new version out while another serves (the options below, or defaults)."
    ),
    steps: str = option("steps", unset=True),
    dwell: float = option("dwell", unset=True),
    max_error_rate: float = option("max_error_rate", unset=True),
    max_p99_ratio: float = option("max_p99_ratio", unset=True),
    min_requests: int = option("min_requests", unset=True),
    max_wait: float = option("max_wait", unset=True),
    significance: float = option("significance", unset=True),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Deploy every new registry version of a model to ENDPOINT (the controller loads, checks, then serves it).

    Without a rollout policy a new version takes all traffic once live; with one (--rollout, or any of its options)
    each new version is rolled out against the version serving, as `serving model rollout` does. The command sets
    the whole configuration: run again without them, new versions take all traffic again."""
    policy = policy_body(
        steps=steps,
        dwell=dwell,
        max_error_rate=max_error_rate,
        max_p99_ratio=max_p99_ratio,
        min_requests=min_requests,
        max_wait=max_wait,
        significance=significance,
    )
    path = endpoint_path(endpoint, "auto-update")
    body = {
        "name": registered_name(name),
        "max_versions": max_versions,
        "rollout": policy if with_rollout or policy else None,
    }
    print_json(AdminApi.for_command(url, token).call("PUT", path, body))


def canary(
    endpoint: str = typer.Argument(...),
    weights: list[float] = typer.Option(..., "--weights", help="One weight per version: --weights 0.1 0.9."),
    versions: list[str] = typer.Option(
        None, "--versions", help="The versions, in the order of the weights: --versions 2 1."
    ),
    newest: int | None = typer.Option(None, "--newest", help="Or: the newest N live versions, newest first."),
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
    steps: str = option("steps"),
    dwell: float = option("dwell"),
    max_error_rate: float = option("max_error_rate"),
    max_p99_ratio: float = option("max_p99_ratio"),
    min_requests: int = option("min_requests"),
    max_wait: float = option("max_wait"),
    significance: float = option("significance"),
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
    policy = policy_body(
        steps=steps,
        dwell=dwell,
        max_error_rate=max_error_rate,
        max_p99_ratio=max_p99_ratio,
        min_requests=min_requests,
        max_wait=max_wait,
        significance=significance,
    )
    api = AdminApi.for_command(url, token)
    answer = api.call("POST", endpoint_path(endpoint, "rollout"), {"version": version, **policy, "dry_run": dry_run})
    if not dry_run:
        print_json(answer)
        started = answer["rollout"]
        console.print(
            f"each step is judged after its {started['dwell']:g} s once both versions answered "
            f"{started['min_requests']} requests; `serving model list {endpoint}` says where it stands and what it "
            "waits for",
            markup=False,
        )
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
