"""`serving`, the console script: one Typer app assembled from the command modules (`services.commands`), the
gateway's endpoint and metric commands and the lifecycle's model, registry and controller commands."""

from __future__ import annotations

from services.commands import (
    analyze,
    dashboards,
    logs,
    model,
    observability,
    reload,
    stack,
    status,
    supervise,
    triton_agent,
)
from services.commands.lifecycle.cli import register_commands
from services.commands.lifecycle.state import state_app
from services.commands.multivalue import MultiValueGroup
from services.common.cli_display import typer_app, whole_summaries
from services.gateway.endpoint_commands import endpoints_app
from services.gateway.metrics_commands import metrics_app

# Every group is a MultiValueGroup: an option that may be repeated also takes several values after one flag, as
# clearml-serving's do (`--weights 0.1 0.9`, `--input-name a b c`).
app = typer_app(
    cls=MultiValueGroup,
    help="Serve a Hugging Face transformer three ways and take it down again.",
    no_args_is_help=True,
)
model_app = typer_app(
    help="Build models (ONNX + tokenizer + manifest), register them, and deploy, roll out or remove their versions.",
    no_args_is_help=True,
)
app.add_typer(model_app, name="model", cls=MultiValueGroup)
app.add_typer(endpoints_app, name="endpoints", cls=MultiValueGroup)
app.add_typer(metrics_app, name="metrics", cls=MultiValueGroup)
app.add_typer(state_app, name="state", cls=MultiValueGroup)
register_commands(model_app, app)
# In this order in `--help`.
model_app.command("build")(model.build)
model_app.command("tiny")(model.tiny)
model_app.command("optimize")(model.optimize)
app.command("model-repo")(model.model_repo)
app.command("up")(stack.up)
app.command("observability")(observability.observability)
app.command("dashboards")(dashboards.dashboards)
app.command("down")(stack.down)
app.command("reload")(reload.reload)
app.command("status")(status.status)
app.command("logs")(logs.logs)
app.command("analyze")(analyze.analyze)
app.command("supervise", hidden=True)(supervise.supervise)
app.command("triton-agent")(triton_agent.triton_agent)
whole_summaries(app)  # `--help` and the CLI reference show each command's first sentence whole


def main() -> None:
    """The console script: user errors end in one line and exit code 2 (`--debug` for the traceback)."""
    from services.common.cli import run

    run(app)


if __name__ == "__main__":
    main()
