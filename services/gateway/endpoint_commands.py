"""`serving endpoints ...` and `serving metrics ...`: edit the gateway's endpoint file (its configured endpoints, and
the custom statistics declared per endpoint); running workers pick changes up without a restart."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

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

    from services.gateway.configured import validate_file
    from services.gateway.endpoints import EndpointConfig, EndpointsFile

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
        _refuse(f"--{'-'.join(str(p) for p in error['loc'])}: {error['msg']}")
    endpoints = EndpointsFile.read(file)
    endpoints.endpoints[name] = config
    problems = validate_file(endpoints, file.resolve().parent)
    if problems:
        _refuse(
            "; ".join(
                f"{endpoint}: {problem}" if endpoint not in problem else problem
                for endpoint, problem in problems.items()
            )
            + f" ({file} not changed"
            + ("; fix or remove the other entries first)" if set(problems) - {name} else ")")
        )
    endpoints.write(file)
    console.print(f"endpoint '{name}' written to {file}")


def _refuse(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


@endpoints_app.command("remove")
def endpoints_remove(name: str = typer.Argument(...), file: Path = ENDPOINTS_FILE) -> None:
    """Remove an endpoint."""
    from services.gateway.endpoints import EndpointsFile

    endpoints = EndpointsFile.read(file)
    if endpoints.endpoints.pop(name, None) is None and endpoints.invalid.pop(name, None) is None:
        _refuse(f"no endpoint '{name}' in {file}")
    endpoints.write(file)
    console.print(f"endpoint '{name}' removed from {file}")


metrics_app = typer.Typer(
    help="Declare custom statistics per endpoint (clearml-serving's `metrics`); the gateway picks changes up "
    "without a restart.",
    no_args_is_help=True,
)


def _pairs(items: list[str], option: str) -> dict[str, list[str]]:
    found = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            _refuse(f"{option} takes NAME=v1,v2,..., not '{item}'")
        found[name] = [v.strip() for v in values.split(",") if v.strip()]
    return found


@metrics_app.command("add")
def metrics_add(
    endpoint: str = typer.Argument(..., help="The endpoint (built-in, deployed or configured)."),
    variable_scalar: list[str] = typer.Option(
        [], "--variable-scalar", help="NAME=b1,b2,...: histogram with these buckets."
    ),
    variable_enum: list[str] = typer.Option(
        [], "--variable-enum", help="NAME=v1,v2,...: count per value (else 'other')."
    ),
    variable_value: list[str] = typer.Option([], "--variable-value", help="NAME: last value (gauge) and a summary."),
    variable_counter: list[str] = typer.Option([], "--variable-counter", help="NAME: a counter (adds the value)."),
    log_frequency: float = typer.Option(None, min=0.0, max=1.0, help="Fraction of requests recorded (default 1)."),
    file: Path = ENDPOINTS_FILE,
) -> None:
    """Declare variables of ENDPOINT, filled from collect_custom_statistics_fn, else the response field, else the
    request field of the same name."""
    from pydantic import ValidationError

    from services.gateway.endpoints import EndpointsFile
    from services.monitoring.statistics import EndpointMetrics, Variable

    endpoints = EndpointsFile.read(file)
    declared = endpoints.metrics.get(endpoint, EndpointMetrics())
    try:
        for name, buckets in _pairs(variable_scalar, "--variable-scalar").items():
            declared.variables[name] = Variable(kind="scalar", buckets=[float(b) for b in buckets])
        for name, values in _pairs(variable_enum, "--variable-enum").items():
            declared.variables[name] = Variable(kind="enum", values=values)
        for name in variable_value:
            declared.variables[name] = Variable(kind="value")
        for name in variable_counter:
            declared.variables[name] = Variable(kind="counter")
    except ValidationError as exc:
        _refuse(exc.errors()[0]["msg"].removeprefix("Value error, "))
    except ValueError as exc:
        _refuse(f"--variable-scalar buckets must be numbers: {exc}")
    if log_frequency is not None:
        declared.log_frequency = log_frequency
    endpoints.metrics[endpoint] = declared
    endpoints.write(file)
    console.print(f"{len(declared.variables)} variable(s) declared for '{endpoint}' in {file}")


@metrics_app.command("list")
def metrics_list(file: Path = ENDPOINTS_FILE) -> None:
    """Show the declared variables."""
    from rich.table import Table

    from services.gateway.endpoints import EndpointsFile

    table = Table("endpoint", "variable", "kind", "buckets / values", "log frequency")
    for endpoint, declared in EndpointsFile.read(file).metrics.items():
        for name, variable in declared.variables.items():
            detail = ",".join(f"{b:g}" for b in variable.buckets) or ",".join(variable.values)
            table.add_row(endpoint, name, variable.kind, detail, f"{declared.log_frequency:g}")
    Console().print(table)


@metrics_app.command("remove")
def metrics_remove(
    endpoint: str = typer.Argument(...),
    variable: list[str] = typer.Option([], "--variable", help="Variables to remove; none: all of the endpoint's."),
    file: Path = ENDPOINTS_FILE,
) -> None:
    """Remove declared variables."""
    from services.gateway.endpoints import EndpointsFile

    endpoints = EndpointsFile.read(file)
    declared = endpoints.metrics.get(endpoint)
    if declared is None:
        _refuse(f"no variables are declared for '{endpoint}' in {file}")
    for name in variable or list(declared.variables):
        if declared.variables.pop(name, None) is None:
            _refuse(f"'{endpoint}' has no variable '{name}'")
    if not declared.variables:
        del endpoints.metrics[endpoint]
    endpoints.write(file)
    console.print(f"removed from '{endpoint}' in {file}")
