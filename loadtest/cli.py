"""`loadtest`: attack a stack and report, Vegeta-style."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from loadtest import engine, external, tracing
from loadtest.report import summarize, text_report
from loadtest.results import Result, read_results, write_results
from loadtest.sentences import MIXES, token_histogram
from loadtest.targets import FORMATS, build_targets, read_vegeta_targets

app = typer.Typer(
    help="Open-loop (Vegeta-style) and closed-loop (ab-style) load tests of the serving stacks.", no_args_is_help=True
)
console = Console(stderr=True)


def run_log() -> logging.Logger:
    """JSON lines into the running stack's log directory (run/logs/loadtest.log), beside the servers' own, so
    `serving logs` shows what the load generator did when; nowhere when no stack has written logs there."""
    from observability.logging import JsonFormatter
    from services.launcher import RUN_DIR

    log = logging.getLogger("loadtest")
    log_dir = RUN_DIR / "logs"
    if not log.handlers and log_dir.is_dir():
        handler = logging.FileHandler(log_dir / "loadtest.log")
        handler.setFormatter(JsonFormatter(service="loadtest"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"--label takes key=value, not '{pair}'")
        labels[key] = value
    return labels


@app.command("attack")
def attack_command(
    url: str = typer.Option("http://127.0.0.1:8080", help="Base URL of the stack."),
    format: str = typer.Option("serve", help=f"Request format: {' | '.join(FORMATS)} (kserve: Triton's ensemble)."),
    targets: Path = typer.Option(
        None, help="Vegeta JSON targets file (one JSON object a line); overrides --url/--format."
    ),
    mix: str = typer.Option("short", help=f"Sentences to send: {' | '.join(MIXES)}."),
    texts: int = typer.Option(1, min=1, help="Texts per request."),
    rate: float = typer.Option(None, help="Requests per second (open loop). Omit for a closed loop."),
    concurrency: int = typer.Option(8, min=1, help="Closed loop: workers each with one request outstanding."),
    duration: float = typer.Option(None, help="Seconds to attack (default 10, or until --requests are done)."),
    requests: int = typer.Option(None, min=1, help="Stop after this many requests (alone: run until they are done)."),
    timeout: float = typer.Option(30.0, help="Per-request timeout, seconds."),
    procs: int = typer.Option(1, min=1, help="Generator processes (open loop), when one cannot hold the rate."),
    engine_name: str = typer.Option("builtin", "--engine", help="builtin | ab | vegeta"),
    output: Path = typer.Option(None, help="Write per-request results here (Vegeta JSON lines)."),
    metrics_port: int = typer.Option(None, help="Serve the generator's Prometheus metrics on this port."),
    label: list[str] = typer.Option([], help="Run label key=value for the metrics (stack, workers, batching, rate)."),
    report: str = typer.Option("text", help="Report printed at the end: text | json | none."),
    trace_ratio: float = typer.Option(
        0.0, min=0.0, max=1.0, help="Share of requests that start a sampled W3C trace (the others carry 'not sampled')."
    ),
    otlp_endpoint: str = typer.Option(
        None, help="Send a client span per sampled request here; default: the stack's own receiver if one is up."
    ),
) -> None:
    """Attack, then print a Vegeta-style report."""
    if targets is not None:
        target_list = read_vegeta_targets(targets)
    else:
        if mix not in MIXES:
            raise typer.BadParameter(f"--mix must be one of {', '.join(MIXES)}")
        target_list = build_targets(url, format, MIXES[mix](max(200, texts * 50)), texts)
    if duration is None and requests is None:
        duration = 10.0
    spec = engine.AttackSpec(
        targets=target_list,
        rate=rate,
        concurrency=concurrency,
        duration=duration,
        requests=requests,
        timeout=timeout,
        name=mix,
        tracing=tracing.client_tracing(
            trace_ratio, format, otlp_endpoint, {"loadtest.attack": mix, "loadtest.rate": rate or 0}
        ),
    )
    if engine_name not in ("builtin", "ab", "vegeta"):
        raise typer.BadParameter(f"--engine must be builtin, ab or vegeta, not '{engine_name}'")
    external.check(engine_name, spec)
    labels = {"rate": str(rate or 0), **_labels(label)}
    observe = None
    if metrics_port:
        from loadtest.metrics import GeneratorMetrics

        generator_metrics = GeneratorMetrics()
        generator_metrics.serve(metrics_port)
        observe = generator_metrics.observer(labels)
    results: list[Result] = []
    total = spec.total()
    with Progress(
        TextColumn("[bold]attack"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("attack", total=total)

        def on_result(result: Result) -> None:
            results.append(result)
            progress.advance(task)
            if observe:
                observe(result)

        if engine_name == "builtin":
            stats = engine.attack(spec, on_result, processes=procs)
        elif engine_name == "ab":
            stats = external.ab_attack(spec, on_result)
        else:  # vegeta: the engine name was checked before the attack started
            stats = external.vegeta_attack(spec, on_result)
    console.print(f"ended: {stats.ended_by(spec)}")
    log = run_log()
    log.info(
        "attack %s ended by %s",
        spec.name,
        stats.ended_by(spec),
        extra={"url": spec.targets[0].url, "requests": stats.sent, "rate": rate, "concurrency": concurrency},
    )
    for note in engine.warnings_for(spec, stats, procs):
        console.print(f"[bold red]WARNING:[/] {note}")
        log.warning(note)
    if output:
        write_results(sorted(results, key=lambda r: r.seq), output)
    if not results:
        console.print("no requests were sent")
        raise typer.Exit(1)
    if report == "text":
        print(text_report(summarize(results)))
    elif report == "json":
        print(json.dumps(summarize(results), indent=2))


@app.command("report")
def report_command(
    files: list[Path] = typer.Argument(..., help="Result files (Vegeta JSON lines)."),
    type: str = typer.Option("text", help="text | json"),
) -> None:
    """Report over result files written by `attack --output` (or by `vegeta encode --to json`)."""
    results = [r for f in files for r in read_results(f)]
    summary = summarize(results)
    print(text_report(summary) if type == "text" else json.dumps(summary, indent=2))


@app.command("matrix")
def matrix_command(
    config: Path = typer.Option(Path("loadtest/matrices/default.toml"), help="Matrix file (TOML)."),
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model."),
    out: Path = typer.Option(Path("results"), help="Runs are written to OUT/<run-id>/."),
    metrics_port: int = typer.Option(None, help="Serve the generator's Prometheus metrics here during the run."),
) -> None:
    """Reproduce the study: every STACK x WORKERS x BATCHING in the matrix file, with a report and charts."""
    from loadtest.matrix import MatrixConfig, run_matrix

    path = run_matrix(MatrixConfig.load(config), model_dir, out, metrics_port)
    console.print(f"report: {path / 'report.md'}")


def _overload_command(config, model_dir: Path, out: Path) -> None:
    import datetime as dt

    from loadtest.overload import run

    report, path = run(config, model_dir, out / dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    console.print(f"report: {path / 'report.md'}")
    if not report.passed:
        raise typer.Exit(1)


@app.command("overload")
def overload_command(
    stack: str = typer.Option("clearml", help="fastapi | triton | clearml"),
    workers: int = typer.Option(2, min=1, help="Front-end worker processes."),
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model."),
    factor: float = typer.Option(3.0, min=1.0, help="Offered load as a multiple of the saturated rate."),
    seconds: float = typer.Option(60.0, min=1.0, help="Length of the overload."),
    saturate: float = typer.Option(10.0, min=1.0, help="Seconds of closed loop that measure the saturated rate."),
    procs: int = typer.Option(1, min=1, help="Generator processes for the open-loop attack."),
    out: Path = typer.Option(Path("results/overload"), help="Runs are written to OUT/<run-id>/."),
) -> None:
    """Attack a fresh stack at FACTOR x its saturated rate; exit 1 unless it sheds cleanly, keeps its goodput and
    memory, and recovers (the checks are printed and written to report.md)."""
    from loadtest.overload import OverloadConfig

    config = OverloadConfig(
        stack=stack, workers=workers, factor=factor, overload_seconds=seconds, saturate_seconds=saturate, procs=procs
    )
    _overload_command(config, model_dir, out)


@app.command("soak")
def soak_command(
    stack: str = typer.Option("clearml", help="fastapi | triton | clearml"),
    workers: int = typer.Option(2, min=1, help="Front-end worker processes."),
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model."),
    minutes: float = typer.Option(30.0, min=0.1, help="Length of the soak."),
    fraction: float = typer.Option(0.7, min=0.05, max=1.0, help="Soak rate as a fraction of the saturated rate."),
    overload_seconds: float = typer.Option(60.0, min=1.0, help="Length of the 3x overload that comes first."),
    procs: int = typer.Option(1, min=1, help="Generator processes for the open-loop phases."),
    out: Path = typer.Option(Path("results/soak"), help="Runs are written to OUT/<run-id>/."),
) -> None:
    """The overload test, then a long run at FRACTION of the saturated rate: errors, latency and memory over
    time (soak.png)."""
    from loadtest.overload import OverloadConfig

    config = OverloadConfig(
        stack=stack,
        workers=workers,
        overload_seconds=overload_seconds,
        soak_seconds=minutes * 60,
        soak_fraction=fraction,
        soak_bin_seconds=max(5.0, minutes * 60 / 120),
        procs=procs,
    )
    _overload_command(config, model_dir, out)


@app.command("tune")
def tune_command(
    stack: str = typer.Argument(..., help="fastapi | triton | clearml"),
    slo_p99_ms: float = typer.Option(250.0, help="The p99 latency a winner must stay under, ms."),
    budget: int = typer.Option(8, min=1, help="Trials at most (each brings the stack up and saturates it)."),
    seconds: float = typer.Option(8.0, min=1.0, help="Saturation seconds per trial."),
    concurrency: int = typer.Option(32, min=1, help="Closed-loop workers per trial."),
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model."),
    out: Path = typer.Option(Path("results/tune"), help="tune-STACK.md and .json go here."),
) -> None:
    """Search the settings that matter (WORKERS; Triton's queue delay, preferred batch sizes, instances; ONNX
    Runtime threads) for the highest throughput whose p99 meets the SLO; prints the winner as a matrix entry."""
    from loadtest.tune import tune, write

    result = tune(stack, model_dir, slo_p99_ms=slo_p99_ms, budget=budget, seconds=seconds, concurrency=concurrency)
    console.print(f"report: {write(result, out)}")
    if result.best is None:
        console.print(f"no trial met p99 <= {slo_p99_ms:g} ms")
        raise typer.Exit(1)
    print(result.matrix_entry())


@app.command("bench")
def bench_command(
    config: Path = typer.Option(Path("loadtest/matrices/bench.toml"), help="The matrix (without tuned entries)."),
    slo_p99_ms: float = typer.Option(250.0, help="p99 SLO for the tuning."),
    budget: int = typer.Option(4, min=1, help="Tuning trials per stack."),
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model."),
    out: Path = typer.Option(Path("results"), help="Runs are written to OUT/<run-id>/."),
    metrics_port: int = typer.Option(None, help="Serve the generator's Prometheus metrics here during the run."),
) -> None:
    """`make bench`: tune every stack (bounded), then race them at their tuned settings beside their defaults and
    the minimal Triton ensemble, in interleaved rounds."""
    from loadtest.matrix import MatrixConfig, run_matrix
    from loadtest.tune import bench_entry, tune, write

    matrix = MatrixConfig.load(config)
    for stack in ("fastapi", "triton", "clearml"):
        console.print(f"[bold]tuning {stack}[/] ({budget} trials, p99 <= {slo_p99_ms:g} ms)")
        result = tune(stack, model_dir, slo_p99_ms=slo_p99_ms, budget=budget)
        write(result, out / "tune")
        entry = bench_entry(result, matrix.configs)
        if entry is None:
            console.print(f"{stack}: the matrix already runs the tuning's winner (or nothing met the SLO)")
        else:
            matrix.configs.append(entry)
    path = run_matrix(matrix, model_dir, out, metrics_port)
    console.print(f"report: {path / 'report.md'}")


@app.command("plot")
def plot_command(run: Path = typer.Argument(..., help="A results/<run-id> directory.")) -> None:
    """Redraw a run's charts and report from its summary.json."""
    from loadtest.matrix import replot

    replot(run)
    console.print(f"report: {run / 'report.md'}")


@app.command("payloads")
def payloads_command(
    tokenizer: Path = typer.Option(Path("build/model/tokenizer.json"), help="Model tokenizer."),
) -> None:
    """Token-length histogram of each sentence mix."""
    from rich.table import Table

    if not tokenizer.is_file():
        raise FileNotFoundError(
            f"no tokenizer at {tokenizer.resolve()}: build the model (`make model`) or pass --tokenizer FILE"
        )
    histograms = {name: token_histogram(make(500), tokenizer) for name, make in MIXES.items()}
    table = Table("tokens", *histograms)
    for bin_name in next(iter(histograms.values())):
        table.add_row(bin_name, *(str(h[bin_name]) for h in histograms.values()))
    Console().print(table)


def main() -> None:
    """The console script: user errors end in one line and exit code 2 (`--debug` for the traceback)."""
    from services.common.cli import run

    run(app)


if __name__ == "__main__":
    main()
