"""`serving endpoints ...`: edit the gateway's configured endpoints in its endpoint file (`serving metrics ...`, in
`metrics_commands`, edits the custom statistics declared there); running workers pick changes up without a restart.
Every change is applied under the file's lock to the file as it is then (`EndpointsFile.update`)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from services.common.errors import ConfigurationError, NotFound, ServingError
from services.common.names import check_name, shown

console = Console(stderr=True, soft_wrap=True)  # one message, one line
endpoints_app = typer.Typer(
    help="Edit the gateway's endpoint file; running workers pick changes up without a restart.", no_args_is_help=True
)
ENDPOINTS_FILE = typer.Option(Path("endpoints.json"), "--file", help="The endpoint file (GATEWAY_ENDPOINTS_FILE).")


def _tensor(text: str):
    """NAME:DTYPE:SHAPE, e.g. input_ids:INT64:-1,-1"""
    from services.common.contract import TensorSpec

    try:
        name, dtype, shape = text.split(":")
        return TensorSpec(name=name, dtype=dtype.upper(), shape=[int(d) for d in shape.split(",")])
    except ValueError:
        raise typer.BadParameter(f"'{text}' is not NAME:DTYPE:SHAPE (e.g. input_ids:INT64:-1,-1)") from None


@endpoints_app.command("list")
def endpoints_list(file: Path = ENDPOINTS_FILE) -> None:
    """Show the configured endpoints."""
    from rich.table import Table

    from services.gateway.endpoints import EndpointsFile

    table = Table("endpoint", "engine", "model", "version", "preprocess", "inputs", "outputs")
    for name, config in EndpointsFile.read(file).endpoints.items():
        table.add_row(
            name,
            config.engine,
            config.model or "",
            config.version or "any",
            config.preprocess or "",
            ", ".join(t.name for t in config.inputs),
            ", ".join(t.name for t in config.outputs),
        )
    Console().print(table)


@endpoints_app.command("add")
def endpoints_add(
    name: str = typer.Argument(..., help="Endpoint name: served at /serve/NAME."),
    engine: str = typer.Option("triton", help="triton | onnxruntime | custom"),
    model: str = typer.Option(None, help="triton: Triton model name; onnxruntime: exported model directory."),
    model_version: str = typer.Option("", help="Triton model version ('' = latest)."),
    version: str = typer.Option(None, help="Version in /serve/NAME/VERSION (default: any)."),
    preprocess: Path = typer.Option(None, help="Python file with class Preprocess (clearml-serving contract)."),
    model_file: str = typer.Option(None, help="Passed to Preprocess.load()."),
    input: list[str] = typer.Option(
        [], "--input", help="NAME:DTYPE:SHAPE, repeat in the order preprocess returns them."
    ),
    output: list[str] = typer.Option([], "--output", help="NAME:DTYPE:SHAPE, repeat for several outputs."),
    file: Path = ENDPOINTS_FILE,
) -> None:
    """Add or replace an endpoint. The whole resulting file is checked as the gateway checks it (preprocess files
    imported, models opened); an invalid change is refused and the file is left as it was."""
    from pydantic import ValidationError

    from services.gateway.endpoints import EndpointConfig

    try:
        config = EndpointConfig(
            engine=engine,
            model=model,
            model_version=model_version,
            version=version,
            preprocess=str(preprocess.resolve()) if preprocess else None,
            model_file=model_file,
            inputs=[_tensor(t) for t in input],
            outputs=[_tensor(t) for t in output],
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        refuse(f"--{'-'.join(str(p) for p in error['loc']) or 'model'}: {error['msg'].removeprefix('Value error, ')}")
    try:
        add_endpoint(file, name, config)
    except ServingError as exc:
        refuse(exc.message)
    console.print(f"endpoint '{name}' written to {file}")


def add_endpoint(file: Path, name: str, config) -> None:
    """Add (or replace) endpoint `name` of `file`. The file with the change is checked first, as the gateway would
    build it (that imports preprocess code and calls its load(), which may take long), without the file's lock; the
    change is then applied under the lock to the file as it is by then, so an entry another command added meanwhile
    is kept. ServingError, with what to fix, if the name or the resulting file is invalid (nothing written)."""
    from services.gateway.configured import validate_file
    from services.gateway.endpoints import EndpointsFile

    check_name(name)
    planned = EndpointsFile.read(file)
    planned.remove("endpoints", name)
    planned.endpoints[name] = config
    if problems := validate_file(planned, file.resolve().parent):
        raise ConfigurationError(
            "; ".join(f"{where}: {problem}" if where not in problem else problem for where, problem in problems.items())
            + f" ({file} not changed"
            + ("; fix or remove the other entries first)" if set(problems) - {name} else ")")
        )

    def apply(current: EndpointsFile) -> None:
        current.remove("endpoints", name)
        current.endpoints[name] = config

    EndpointsFile.update(file, apply)


def refuse(message: str) -> NoReturn:
    console.print(f"[bold red]error:[/] {escape(message)}")  # the message as it is, brackets too
    raise typer.Exit(2)


@endpoints_app.command("remove")
def endpoints_remove(name: str = typer.Argument(...), file: Path = ENDPOINTS_FILE) -> None:
    """Remove an endpoint (a valid one, or one the gateway reports invalid, whatever its name)."""
    from services.gateway.endpoints import EndpointsFile

    def apply(current: EndpointsFile) -> None:
        if not current.remove("endpoints", name):
            raise NotFound(f"no endpoint {shown(name)} in {file}")

    try:
        EndpointsFile.update(file, apply)
    except ServingError as exc:
        refuse(exc.message)
    console.print(f"endpoint {shown(name)} removed from {file}")
