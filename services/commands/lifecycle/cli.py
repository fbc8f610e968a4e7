"""The lifecycle's commands, added to the `serving` CLI:

- `serving model register`, `serving train`, `serving registry` talk to the model registry (MLflow) directly
  (`commands_registry`);
- `serving model auto-update|canary|rollout|redeploy|remove|list` talk to the gateway's admin API with its bearer token
  (`--token`, else GATEWAY_ADMIN_TOKEN, else the token `serving up` wrote to the run directory) (`commands_traffic`,
  `commands_list`);
- `serving controller` runs the controller that carries those requests out.

Each command reads the run directory from the settings when it runs, not at import."""

from __future__ import annotations

import typer

from services.commands.lifecycle.listing import list_models
from services.commands.lifecycle.registry import register, registry_ui, train
from services.commands.lifecycle.traffic import auto_update, canary, redeploy, remove, rollout


def controller() -> None:
    """Run the lifecycle controller in the foreground (`make up STACK=clearml` starts it for you)."""
    from services.controller import main

    main()


def register_commands(model_app: typer.Typer, app: typer.Typer) -> None:
    """Add the lifecycle's commands to the `serving model` group and to `serving` itself."""
    model_app.command("register")(register)
    model_app.command("auto-update")(auto_update)
    model_app.command("canary")(canary)
    model_app.command("rollout")(rollout)
    model_app.command("list")(list_models)
    model_app.command("remove")(remove)
    model_app.command("redeploy")(redeploy)
    app.command("train")(train)
    app.command("registry")(registry_ui)
    app.command("controller")(controller)
