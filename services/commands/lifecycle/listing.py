"""`serving model list`: the deployed endpoints, with each version's live request rate measured over one second, and
under the table where a rollout stands and how close a variant measured to its source."""

from __future__ import annotations

import time

import typer
from rich.console import Console
from rich.table import Table

from services.commands.lifecycle.common import TOKEN, URL, AdminApi, print_json
from services.common.cli import fail
from services.common.cli_display import WIDE, show
from services.common.cli_display import table as listing
from services.lifecycle.rollouts.plan import status

RATE_WINDOW = 1.0
"""Seconds between the two reads of the request counters: one, so a counter's growth is its rate per second."""


def list_models(
    endpoint: str | None = typer.Argument(None, help="Only this endpoint."),
    as_json: bool = typer.Option(False, "--json", help="JSON on stdout, for scripts."),
    wide: bool = typer.Option(False, "--wide", help="One line per row whatever the terminal's width."),
    url: str = URL,
    token: str = TOKEN,
) -> None:
    """Deployed endpoints: versions, state, traffic share and why, live request rate, where each version came from."""
    api = AdminApi.for_command(url, token)
    endpoints = measured_rates(api, endpoint)
    if endpoint is not None and not endpoints:
        deployed = [item["endpoint"] for item in api.call("GET", "/admin/endpoints")["endpoints"]]
        fail(f"no deployed endpoint '{endpoint}'; deployed: {', '.join(deployed) or 'none yet'}")
    if as_json:
        print_json(endpoints)
        return
    console = Console(emoji=False, markup=False, width=WIDE if wide else None)
    if not endpoints:
        console.print("no deployed endpoint")
        return
    show(table(endpoints), console)
    for item in endpoints:
        if item.get("rollout"):
            console.print(f"{item['endpoint']}: {status(item['rollout'])}")
        if item.get("new_versions"):
            console.print(f"{item['endpoint']}: new versions of '{item['registered_name']}' {item['new_versions']}")
        for version in item["versions"]:
            if line := variant_line(version):
                console.print(f"{item['endpoint']}: {line}")
        if item.get("hand_back"):
            console.print(f"{item['endpoint']}: `{item['hand_back']}` hands traffic back to the newest live version")


def variant_line(version: dict) -> str | None:
    """For a version made by `serving model optimize` (its lineage's `variant`), what it was made from and how close
    it measured to it, shown beside the rollout's status; None for any other version."""
    variant = version.get("variant")
    if not variant:
        return None
    source = variant.get("source") or {}
    made_from = f"version {source['version']}" if source.get("version") else "a local build"
    names = {"mean_cosine": "mean cosine", "min_cosine": "min cosine", "topk_agreement": "top-10 agreement"}
    names |= {"label_agreement": "label agreement", "accuracy": "accuracy", "source_accuracy": "source's accuracy"}
    quality = variant.get("quality") or {}
    figures = ", ".join(f"{label} {quality[key]:.4f}" for key, label in names.items() if key in quality)
    figures = figures or "no quality figures recorded"
    verdict = "passed its quality gate" if variant.get("passed") else "BELOW its quality gate (overridden)"
    return f"version {version['version']} is the {variant['variant']} variant of {made_from}: {figures}; {verdict}"


def measured_rates(api: AdminApi, only: str | None = None) -> list[dict]:
    """The deployed endpoints (all, or `only`), each version's request rate measured over `RATE_WINDOW`."""
    first = api.call("GET", "/admin/endpoints")
    time.sleep(RATE_WINDOW)
    second = api.call("GET", "/admin/endpoints")
    return with_rates(first["endpoints"], second["endpoints"], only)


def with_rates(first: list[dict], second: list[dict], only: str | None = None) -> list[dict]:
    """The endpoints of the second read (all, or `only`), each version with `requests_per_second` since the first
    read (0 for a version the first read did not have)."""
    before = {(e["endpoint"], v["version"]): v["requests_total"] for e in first for v in e["versions"]}
    endpoints = [e for e in second if only in (None, e["endpoint"])]
    for item in endpoints:
        for version in item["versions"]:
            previous = before.get((item["endpoint"], version["version"]), version["requests_total"])
            version["requests_per_second"] = round(version["requests_total"] - previous, 1)
    return endpoints


def table(endpoints: list[dict]) -> Table:
    rows = listing(
        "endpoint", "version", "state", "traffic", "req/s", "why", "registry", "run", "reason", prose=("why", "reason")
    )
    for item in endpoints:
        for v in item["versions"]:
            registry = v.get("registry", {})
            rows.add_row(
                item["endpoint"],
                v["version"],
                v["state"],
                f"{v['traffic_share']:.0%}",
                f"{v['requests_per_second']:g}",
                v.get("share_reason", ""),
                f"{registry['name']} v{registry['version']}" if registry.get("name") else "-",
                v.get("run", {}).get("id", "")[:12] or "-",
                v.get("reason") or "",
            )
    return rows
