"""`serving endpoints ...`: edit the gateway's configured endpoints in its endpoint file (`serving metrics ...`, in
`metrics_commands`, edits the custom statistics declared there); running workers pick changes up without a restart.
Every change is applied under the file's lock to the file as it is then (`EndpointsFile.update`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.common.cli import console, fail
from services.common.cli_display import typer_app
from services.common.errors import ConfigurationError, InvalidInput, NotFound, ServingError
from services.common.names import check_name, shown
from services.gateway import engines
from services.gateway.engine_names import EngineName

if TYPE_CHECKING:
    from services.gateway.endpoints import EndpointConfig

endpoints_app = typer_app(
    help="Edit the gateway's endpoint file; running workers pick changes up without a restart.", no_args_is_help=True
)
ENDPOINTS_FILE = typer.Option(
    None,
    "--file",
    help="The endpoint file (GATEWAY_ENDPOINTS_FILE); default: endpoints.json in the run directory (SERVING_RUN_DIR).",
)


def endpoints_file(file: Path | None) -> Path:
    """`--file` as given (relative to the shell's directory), else the run directory's endpoint file, the one
    `serving up` started in that run directory reads."""
    from services.common.settings import RunSettings, unread_endpoints_file

    if file is not None:
        return file
    run = RunSettings()
    if note := unread_endpoints_file(run.run_dir):
        console.print(note, markup=False)
    return run.endpoints_file


@endpoints_app.command("list")
def endpoints_list(
    file: Path | None = ENDPOINTS_FILE,
    as_json: bool = typer.Option(False, "--json", help="The file's endpoints as JSON on stdout, for scripts."),
) -> None:
    """Show the configured endpoints."""
    from services.common.cli_display import show, table
    from services.gateway.endpoints import EndpointsFile

    endpoints = EndpointsFile.read(endpoints_file(file)).endpoints
    if as_json:
        print(json.dumps({name: config.model_dump() for name, config in endpoints.items()}, indent=2))
        return
    rows = table(
        "endpoint", "engine", "model", "model file", "version", "preprocess", "inputs", "outputs",
        prose=("inputs", "outputs"), whole=("model file", "preprocess"),
    )  # fmt: skip
    for name, config in endpoints.items():
        rows.add_row(
            name,
            config.engine,
            config.model or "",
            config.model_file or "",
            config.version or "any",
            config.preprocess or "",
            ", ".join(t.name for t in config.inputs),
            ", ".join(t.name for t in config.outputs),
        )
    show(rows)


ENGINE_HELP = "What runs between preprocess and postprocess. " + "; ".join(
    f"{engine.name}: {engine.summary}" for engine in engines.ENGINES.values()
)
TENSOR_HELP = {
    "name": "{0} names, clearml-serving's form: --{1}-name a b (with --{1}-type and --{1}-size).",
    "type": "One dtype per --{1}-name: a numpy name (int64, float32) or a Triton one (INT64, FP32).",
    "size": 'One JSON shape per --{1}-name, the batch axis first: "[-1, -1]".',
}


def _tensor_option(direction: str, field: str) -> list[str]:
    return typer.Option([], f"--{direction}-{field}", help=TENSOR_HELP[field].format(direction.title(), direction))


@endpoints_app.command("add")
def endpoints_add(
    name: str = typer.Argument(..., help="Endpoint name: served at /serve/NAME."),
    engine: EngineName = typer.Option("triton", help=ENGINE_HELP),
    model: str | None = typer.Option(None, help="triton: Triton model name; onnxruntime: exported model directory."),
    model_version: str = typer.Option("", help="Triton model version ('' = latest)."),
    version: str | None = typer.Option(None, help="Version in /serve/NAME/VERSION (default: any)."),
    preprocess: Path | None = typer.Option(None, help="Python file with class Preprocess (clearml-serving contract)."),
    model_file: str = typer.Option(
        None,
        help="Passed to Preprocess.load(); the model of sklearn (.skops; a joblib/pickle file runs code when loaded), "
        "xgboost (.json, .ubj), lightgbm (its text model).",
    ),
    input: list[str] = typer.Option(
        [], "--input", help="NAME:DTYPE:SHAPE, repeat in the order preprocess returns them (or --input-name ...)."
    ),
    input_name: list[str] = _tensor_option("input", "name"),
    input_type: list[str] = _tensor_option("input", "type"),
    input_size: list[str] = _tensor_option("input", "size"),
    output: list[str] = typer.Option(
        [], "--output", help="NAME:DTYPE:SHAPE, repeat for several outputs (or --output-name ...)."
    ),
    output_name: list[str] = _tensor_option("output", "name"),
    output_type: list[str] = _tensor_option("output", "type"),
    output_size: list[str] = _tensor_option("output", "size"),
    triton_url: str = typer.Option(
        None, help="Triton's gRPC address, to check the model and tensors (default: GATEWAY_TRITON_GRPC_URL)."
    ),
    file: Path | None = ENDPOINTS_FILE,
) -> None:
    """Add or replace an endpoint. The whole resulting file is checked as the gateway checks it (preprocess files
    imported, models opened; a pickled model only by its first bytes: its loading runs code, and only the gateway
    loads it), and a triton endpoint's model and tensors against Triton when it answers; an invalid change is
    refused and the file is left as it was.

    Dtypes are Triton names (INT64, FP32, BYTES...) or numpy names (int64, float32, object...); shapes start with
    the batch axis, -1 for a dynamic one."""
    from services.gateway.tensor_options import declared

    file = endpoints_file(file)
    try:
        inputs, listed_in = declared("input", input, input_name, input_type, input_size)
        outputs, listed_out = declared("output", output, output_name, output_type, output_size)
        config = _config(
            engine=engine,
            model=model,
            model_version=model_version,
            version=version,
            preprocess=str(preprocess.resolve()) if preprocess else None,
            model_file=model_file and as_given(model_file, file),
            inputs=inputs,
            outputs=outputs,
        )
        listed = {direction for direction, used in (("input", listed_in), ("output", listed_out)) if used}
        warn_if_code(config, file)
        check_triton(config, triton_url, listed)
        add_endpoint(file, name, config)
    except ServingError as exc:
        fail(exc.message)
    console.print(f"endpoint '{name}' written to {file}", markup=False)


def _config(**fields):
    """The endpoint's configuration; InvalidInput naming the option (and the fix) when a field is wrong, or when the
    engine's library is not installed."""
    from pydantic import ValidationError

    from services.gateway.endpoints import EndpointConfig

    if problem := engines.missing(fields["engine"]):
        raise InvalidInput(problem)
    try:
        return EndpointConfig(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        message = error["msg"].removeprefix("Value error, ")
        # a check of the whole entry has no field: its message starts with what it is about (input, output, model)
        option = "-".join(str(p) for p in error["loc"]) or next(
            (word for word in ("input", "output") if message.startswith(word + " ")), "model"
        )
        raise InvalidInput(f"--{option}: {message}") from None


def as_given(model_file: str, file: Path) -> str:
    """`--model-file` as the endpoint file keeps it: a relative path found beside the endpoint file as written (the
    gateway takes it from there, `configured.model_file`), one found from the shell's directory instead made
    absolute (the endpoint file may lie elsewhere, in the run directory), anything else as written."""
    path = Path(model_file)
    if path.is_absolute() or (file.resolve().parent / path).exists() or not path.exists():
        return model_file
    return str(path.resolve())


def warn_if_code(config: EndpointConfig, file: Path) -> None:
    """One warning line when the endpoint's engine runs code in loading its model file (a pickle)."""
    from services.gateway.configured import model_file
    from services.gateway.model_files import runs_code_warning

    path = model_file(config, file.resolve().parent)
    if path and config.model_file and engines.get(config.engine).runs_code(path):
        console.print(f"warning: {runs_code_warning(config.model_file)}", markup=False)


def check_triton(config: EndpointConfig, url: str | None, listed: set[str]) -> None:
    """A triton endpoint's model and tensors against Triton's own (`services.triton.metadata`), at `triton_address`:
    the address the gateway sends this endpoint's requests to. ServingError with
    the fix, in the form the tensors were given in (`listed`: the directions given as lists). A Triton that does not
    answer is said in one line and nothing is checked."""
    if not engines.get(config.engine).sends_to_triton or not config.model:
        return
    from services.gateway.tensor_options import fix
    from services.triton.metadata import TritonUnreachable, differences, model_tensors

    url = triton_address(url)
    try:
        found = model_tensors(url, config.model, config.model_version, control_key=local_control_key())
    except TritonUnreachable as exc:
        console.print(
            f"note: {exc}: Triton model '{config.model}' and its tensors not checked "
            "(--triton-url HOST:PORT names Triton's gRPC address)"
        )
        return
    if problems := differences(found, config.inputs, config.outputs, fix(listed)):
        raise ConfigurationError("; ".join(problems) + " (nothing written)")


def local_control_key() -> str | None:
    """The model-control key of the stack `serving up` started in this run directory, when this user may read it."""
    from services.common.settings import RunSettings
    from services.triton.control_key import KEY_FILE, read_control_key

    try:
        return read_control_key(RunSettings().run_dir / KEY_FILE)
    except ConfigurationError:
        return None


def triton_address(url: str | None) -> str:
    """`--triton-url`, else GATEWAY_TRITON_GRPC_URL when set, else the Triton of the stack `serving up` started in
    this run directory (its ports may not be the defaults), else the default address."""
    from services.common.settings import RunSettings
    from services.gateway.settings import GatewaySettings
    from services.launcher.records import read_stack_info

    gateway = GatewaySettings()
    if url or "triton_grpc_url" in gateway.model_fields_set:
        return url or gateway.triton_grpc_url
    return read_stack_info(RunSettings().run_dir).get("urls", {}).get("triton_grpc") or gateway.triton_grpc_url


def add_endpoint(file: Path, name: str, config: EndpointConfig) -> None:
    """Add (or replace) endpoint `name` of `file`. The file with the change is checked first, as the gateway would
    build it (that imports preprocess code and calls its load(), which may take long), without the file's lock; the
    change is then applied under the lock to the file as it is by then, so an entry another command added meanwhile
    is kept. ServingError, with what to fix, if the name or the resulting file is invalid (nothing written)."""
    from services.gateway.configured import validate_file
    from services.gateway.endpoints import EndpointsFile
    from services.gateway.settings import GatewaySettings

    check_name(name)
    planned = EndpointsFile.read(file)
    planned.remove("endpoints", name)
    planned.endpoints[name] = config
    limit = GatewaySettings().endpoints_load_timeout  # the gateway's own limit (GATEWAY_ENDPOINTS_LOAD_TIMEOUT)
    if problems := validate_file(planned, file.resolve().parent, limit):
        raise ConfigurationError(
            "; ".join(f"{where}: {problem}" if where not in problem else problem for where, problem in problems.items())
            + f" ({file} not changed"
            + ("; fix or remove the other entries first)" if set(problems) - {name} else ")")
        )

    def apply(current: EndpointsFile) -> None:
        current.remove("endpoints", name)
        current.endpoints[name] = config

    EndpointsFile.update(file, apply)


@endpoints_app.command("remove")
def endpoints_remove(name: str = typer.Argument(...), file: Path | None = ENDPOINTS_FILE) -> None:
    """Remove an endpoint (a valid one, or one the gateway reports invalid, whatever its name)."""
    from services.gateway.endpoints import EndpointsFile

    file = endpoints_file(file)

    def apply(current: EndpointsFile) -> None:
        if not current.remove("endpoints", name):
            raise NotFound(f"no endpoint {shown(name)} in {file}")

    try:
        EndpointsFile.update(file, apply)
    except ServingError as exc:
        fail(exc.message)
    console.print(f"endpoint {shown(name)} removed from {file}", markup=False)
