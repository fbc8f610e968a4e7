"""`serving metrics ...`: declare custom statistics per endpoint in the gateway's endpoint file (clearml-serving's
`metrics`); running workers pick changes up without a restart. Every change is applied under the file's lock to the
file as it is then (`EndpointsFile.update`), as `serving endpoints ...` does."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from services.common.cli import console, fail
from services.common.cli_display import typer_app
from services.common.errors import InvalidInput, NotFound, ServingError
from services.common.names import check_name, shown
from services.gateway.endpoint_commands import ENDPOINTS_FILE, endpoints_file

metrics_app = typer_app(
    help="Declare custom statistics per endpoint (clearml-serving's `metrics`); the gateway picks changes up "
    "without a restart.",
    no_args_is_help=True,
)


def _pairs(items: list[str], option: str) -> dict[str, list[str]]:
    found = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            fail(f"{option} takes NAME=v1,v2,..., not '{item}'")
        found[name] = [v.strip() for v in values.split(",") if v.strip()]
    return found


def _variables(scalar: list[str], enum: list[str], value: list[str], counter: list[str]) -> dict:
    """The declared variables by name, each checked (InvalidInput with what to fix)."""
    from pydantic import ValidationError

    from services.monitoring.statistics import Variable

    try:
        return {
            **{
                n: Variable(kind="scalar", buckets=[float(b) for b in v])
                for n, v in _pairs(scalar, "--variable-scalar").items()
            },
            **{n: Variable(kind="enum", values=v) for n, v in _pairs(enum, "--variable-enum").items()},
            **{n: Variable(kind="value") for n in value},
            **{n: Variable(kind="counter") for n in counter},
        }
    except ValidationError as exc:
        raise InvalidInput(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
    except ValueError as exc:
        raise InvalidInput(f"--variable-scalar buckets must be numbers: {exc}") from None


@metrics_app.command("add")
def metrics_add(
    endpoint: str = typer.Argument(..., help="The endpoint (built-in, deployed or configured)."),
    variable_scalar: list[str] = typer.Option(
        [], "--variable-scalar", help="NAME=b1,b2,...: histogram with these buckets; several: x=0,1 y=1,5."
    ),
    variable_enum: list[str] = typer.Option(
        [], "--variable-enum", help="NAME=v1,v2,...: count per value (else 'other'); several: a=x,y b=z."
    ),
    variable_value: list[str] = typer.Option(
        [], "--variable-value", help="NAME ...: last value (gauge) and a summary."
    ),
    variable_counter: list[str] = typer.Option([], "--variable-counter", help="NAME ...: a counter (adds the value)."),
    log_frequency: float | None = typer.Option(
        None, min=0.0, max=1.0, help="Fraction of requests recorded (default 1)."
    ),
    file: Path | None = ENDPOINTS_FILE,
) -> None:
    """Declare variables of ENDPOINT, filled from collect_custom_statistics_fn, else the response field, else the
    request field of the same name."""
    from services.gateway.endpoints import EndpointsFile
    from services.monitoring.statistics import EndpointMetrics

    file = endpoints_file(file)

    def apply(current: EndpointsFile) -> int:
        declared = current.metrics.get(endpoint) or EndpointMetrics()
        declared.variables.update(variables)
        if log_frequency is not None:
            declared.log_frequency = log_frequency
        current.metrics[endpoint] = declared
        return len(declared.variables)

    try:
        check_name(endpoint)
        variables = _variables(variable_scalar, variable_enum, variable_value, variable_counter)
        count = EndpointsFile.update(file, apply)
    except ServingError as exc:
        fail(exc.message)
    console.print(f"{count} variable(s) declared for '{endpoint}' in {file}", markup=False)


@metrics_app.command("list")
def metrics_list(
    file: Path | None = ENDPOINTS_FILE,
    as_json: bool = typer.Option(False, "--json", help="The declared variables as JSON on stdout, for scripts."),
) -> None:
    """Show the declared variables."""
    from services.common.cli_display import show, table
    from services.gateway.endpoints import EndpointsFile

    declared_metrics = EndpointsFile.read(endpoints_file(file)).metrics
    if as_json:
        print(json.dumps({name: declared.model_dump() for name, declared in declared_metrics.items()}, indent=2))
        return
    rows = table("endpoint", "variable", "kind", "buckets / values", "log frequency", prose=("buckets / values",))
    for endpoint, declared in declared_metrics.items():
        for name, variable in declared.variables.items():
            detail = ", ".join(f"{b:g}" for b in variable.buckets) or ", ".join(variable.values)
            rows.add_row(endpoint, name, variable.kind, detail, f"{declared.log_frequency:g}")
    show(rows)


@metrics_app.command("remove")
def metrics_remove(
    endpoint: str = typer.Argument(...),
    variable: list[str] = typer.Option(
        [], "--variable", help="Variables to remove (--variable a b); none: all of the endpoint's."
    ),
    file: Path | None = ENDPOINTS_FILE,
) -> None:
    """Remove declared variables (all of them: also an entry the gateway reports invalid, whatever its name)."""
    from services.gateway.endpoints import EndpointsFile

    file = endpoints_file(file)

    def apply(current: EndpointsFile) -> None:
        declared = current.metrics.get(endpoint)
        if declared is None:
            if not variable and current.remove("metrics", endpoint):
                return
            raise NotFound(f"no variables are declared for {shown(endpoint)} in {file}")
        for name in variable or list(declared.variables):
            if declared.variables.pop(name, None) is None:
                raise NotFound(f"{shown(endpoint)} has no variable '{name}'")
        if not declared.variables:
            del current.metrics[endpoint]

    try:
        EndpointsFile.update(file, apply)
    except ServingError as exc:
        fail(exc.message)
    console.print(f"removed from {shown(endpoint)} in {file}", markup=False)
