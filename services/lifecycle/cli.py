"""`serving model register|auto-update|canary|rollout|list|remove` and `serving controller`.

`register` talks to the registry (MLflow) directly; the others talk to the gateway's admin API with its bearer
token (`--token`, else GATEWAY_ADMIN_TOKEN, else the token `serving up` wrote to the run directory)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

from services.launcher import RUN_DIR

console = Console(stderr=True, soft_wrap=True)  # one message, one line
URL = typer.Option("http://127.0.0.1:8080", "--url", help="The gateway.")
TOKEN = typer.Option(None, "--token", help="Admin token (default: GATEWAY_ADMIN_TOKEN, else run/admin-token).")


def fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


def admin_token(token: str | None) -> str:
    token = token or os.environ.get("GATEWAY_ADMIN_TOKEN")
    path = RUN_DIR / "admin-token"
    if token:
        return token
    if path.is_file():
        return path.read_text().strip()
    fail(f"no admin token: pass --token, set GATEWAY_ADMIN_TOKEN, or start the stack (`make up`) to create {path}")


def call(method: str, url: str, path: str, token: str | None, body: dict | None = None) -> dict:
    headers = {"Authorization": f"Bearer {admin_token(token)}"}
    try:
        response = httpx.request(method, f"{url.rstrip('/')}{path}", json=body, headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        fail(f"the gateway at {url} did not answer ({exc}); is the stack up (`make up DETACH=1`)?")
    if response.status_code >= 400:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:300]
        fail(f"{response.status_code}: {message}")
    return response.json()


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def register_commands(model_app: typer.Typer, app: typer.Typer) -> None:
    @model_app.command("register")
    def register(
        model_dir: Path = typer.Argument(None, help="A local Hugging Face checkpoint (default: all-MiniLM-L6-v2)."),
        name: str = typer.Option(..., "--name", help="Registered model name."),
        dataset: Path = typer.Option(None, help="The data set the model was trained on (a file)."),
        dataset_name: str = typer.Option(None, help="Data set name (default: the file's stem)."),
        dataset_version: str = typer.Option(None, help="Data set version."),
        run_id: str = typer.Option(None, help="Log into this (training) run instead of a new one."),
    ) -> None:
        """Build a checkpoint (ONNX + tokenizer + manifest), log it with its lineage, register a new version."""
        from services.common.errors import ServingError
        from services.registry.mlflow_registry import DatasetRef, ModelRegistry

        ref = DatasetRef(dataset, dataset_name, dataset_version) if dataset else None
        try:
            print_json(ModelRegistry().register(model_dir, name, dataset=ref, run_id=run_id))
        except ServingError as exc:
            fail(str(exc))

    @model_app.command("auto-update")
    def auto_update(
        endpoint: str = typer.Argument(..., help="Endpoint: served at /serve/ENDPOINT."),
        name: str = typer.Option(..., "--name", help="Registered model whose new versions are deployed."),
        max_versions: int = typer.Option(2, min=1, help="Live versions kept; older ones are drained and unloaded."),
        url: str = URL,
        token: str = TOKEN,
    ) -> None:
        """Deploy every new registry version of a model to ENDPOINT (the controller loads, checks, then serves it)."""
        print_json(
            call(
                "PUT",
                url,
                f"/admin/endpoints/{endpoint}/auto-update",
                token,
                {"name": name, "max_versions": max_versions},
            )
        )

    @model_app.command("canary")
    def canary(
        endpoint: str = typer.Argument(...),
        weights: list[float] = typer.Option(..., "--weights", help="One weight per version, e.g. 0.1 0.9."),
        versions: list[str] = typer.Option(None, "--versions", help="Versions, in the order of the weights."),
        newest: int = typer.Option(None, "--newest", help="Or: the newest N live versions, newest first."),
        url: str = URL,
        token: str = TOKEN,
    ) -> None:
        """Split ENDPOINT's traffic by weight (send `x-canary-key` to keep a caller on one version)."""
        body = {"weights": weights, "versions": versions or None, "newest": newest}
        print_json(call("PUT", url, f"/admin/endpoints/{endpoint}/canary", token, body))

    @model_app.command("rollout")
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
        """Move ENDPOINT's traffic to VERSION step by step; a breach rolls back at once and tags the registry."""
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
        print_json(call("POST", url, f"/admin/endpoints/{endpoint}/rollout", token, body))

    @model_app.command("list")
    def list_models(
        endpoint: str = typer.Argument(None, help="Only this endpoint."),
        as_json: bool = typer.Option(False, "--json", help="JSON on stdout, for scripts."),
        url: str = URL,
        token: str = TOKEN,
    ) -> None:
        """Deployed endpoints: versions, state, traffic share, live request rate, where each version came from."""
        first = call("GET", url, "/admin/endpoints", token)
        time.sleep(1.0)
        second = call("GET", url, "/admin/endpoints", token)
        before = {(e["endpoint"], v["version"]): v["requests_total"] for e in first["endpoints"] for v in e["versions"]}
        endpoints = [e for e in second["endpoints"] if endpoint in (None, e["endpoint"])]
        for item in endpoints:
            for version in item["versions"]:
                previous = before.get((item["endpoint"], version["version"]), version["requests_total"])
                version["requests_per_second"] = round(version["requests_total"] - previous, 1)
        if as_json:
            print_json(endpoints)
            return
        table = Table("endpoint", "version", "state", "traffic", "req/s", "registry", "run", "reason")
        for item in endpoints:
            for v in item["versions"]:
                registry = v.get("registry", {})
                table.add_row(
                    item["endpoint"],
                    v["version"],
                    v["state"],
                    f"{v['traffic_share']:.0%}",
                    f"{v['requests_per_second']:g}",
                    f"{registry.get('name', '')} v{registry.get('version', '')}",
                    v.get("run", {}).get("id", "")[:12],
                    (v.get("reason") or "")[:60],
                )
        Console().print(table if endpoints else "no deployed endpoint")

    @model_app.command("remove")
    def remove(
        endpoint: str = typer.Argument(...),
        version: str = typer.Option(..., "--version"),
        url: str = URL,
        token: str = TOKEN,
    ) -> None:
        """Take VERSION out of traffic, then unload it once in-flight requests are done."""
        print_json(call("DELETE", url, f"/admin/endpoints/{endpoint}/versions/{version}", token))

    @app.command("train")
    def train(
        name: str = typer.Option("sentiment", "--name", help="Registered model name for the trained classifier."),
        epochs: int = typer.Option(3, min=1, help="Fine-tuning epochs."),
    ) -> None:
        """Example pipeline: fine-tune a sentiment classifier on the shipped data set and register it (MLflow runs
        for each step; about a minute on 2 cores)."""
        from services.registry.train import main_json

        sys.stdout.write(main_json(name, epochs) + "\n")

    @app.command("registry")
    def registry_ui(
        port: int = typer.Option(5000, help="Port of the MLflow UI."),
        host: str = typer.Option("127.0.0.1", help="Address to bind."),
    ) -> None:
        """Start the MLflow UI over the project's registry store in the background (`make down` stops it)."""
        from services.common.errors import ServingError
        from services.launcher import Launcher
        from services.registry.mlflow_registry import ModelRegistry
        from services.registry.ui import ui_process

        registry = ModelRegistry()  # creates the store's tables if this is its first use
        try:
            Launcher(RUN_DIR).start_ready(ui_process(registry.settings, host, port), detach=True, timeout=120)
        except ServingError as exc:
            fail(str(exc))
        console.print(f"MLflow UI on http://{host}:{port} (store {registry.uri}); `make down` stops it")

    @app.command("controller")
    def controller() -> None:
        """Run the lifecycle controller in the foreground (`make up STACK=clearml` starts it for you)."""
        from services.lifecycle.controller import main

        main()
