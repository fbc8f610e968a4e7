"""`loadtest attack`, `loadtest report` and `loadtest payloads`: one attack on a running stack and its Vegeta-style
report, reports over saved results, and what the sentence mixes send."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from loadtest import engine, external, tracing
from loadtest.cli.options import labels
from loadtest.report import summarize, text_report
from loadtest.results import Result, new_results_file, newest_results, read_results, write_results
from loadtest.sentences import MIXES, token_histogram
from loadtest.spec import AttackSpec, AttackStats, warnings_for
from loadtest.targets import FORMATS, build_targets, read_vegeta_targets
from services.common.settings import RunSettings

console = Console(stderr=True)

ENGINES = ("builtin", "ab", "vegeta")


def attack_command(
    url: str = typer.Option(
        "http://127.0.0.1:8080", help="Base URL of the stack (grpc://HOST:PORT for --format grpc, the gateway's)."
    ),
    format: str = typer.Option(
        "serve",
        help=f"Request format: {' | '.join(FORMATS)} (kserve: Triton's ensemble; grpc: the gateway's Open Inference "
        "Protocol over gRPC, ModelInfer, without trace context).",
    ),
    targets: Path | None = typer.Option(
        None, help="Vegeta JSON targets file (one JSON object a line); overrides --url/--format."
    ),
    mix: str = typer.Option("short", help=f"Sentences to send: {' | '.join(MIXES)}."),
    texts: int = typer.Option(1, min=1, help="Texts per request."),
    rate: float | None = typer.Option(None, help="Requests per second (open loop). Omit for a closed loop."),
    concurrency: int = typer.Option(8, min=1, help="Closed loop: workers each with one request outstanding."),
    duration: float | None = typer.Option(None, help="Seconds to attack (default 10, or until --requests are done)."),
    requests: int | None = typer.Option(
        None, min=1, help="Stop after this many requests (alone: run until they are done)."
    ),
    timeout: float = typer.Option(30.0, help="Per-request timeout, seconds."),
    procs: int = typer.Option(1, min=1, help="Generator processes (open loop), when one cannot hold the rate."),
    engine_name: str = typer.Option("builtin", "--engine", help="builtin | ab | vegeta"),
    output: Path | None = typer.Option(
        None,
        help="Write per-request results here (Vegeta JSON lines); default: <run dir>/results/attack-<UTC time>.jsonl "
        "(SERVING_RUN_DIR).",
    ),
    metrics_port: int | None = typer.Option(None, help="Serve the generator's Prometheus metrics on this port."),
    label: list[str] = typer.Option([], help="Run label key=value for the metrics (stack, workers, batching, rate)."),
    report: str = typer.Option("text", help="Report printed at the end: text | json | none."),
    trace_ratio: float = typer.Option(
        0.0, min=0.0, max=1.0, help="Share of requests that start a sampled W3C trace (the others carry 'not sampled')."
    ),
    otlp_endpoint: str | None = typer.Option(
        None, help="Send a client span per sampled request here; default: the stack's own receiver if one is up."
    ),
) -> None:
    """Attack, then print a Vegeta-style report."""
    if format == "grpc" and trace_ratio and targets is None:
        raise typer.BadParameter("--format grpc sends no trace context: drop --trace-ratio")
    spec = AttackSpec(
        targets=_targets(targets, url, format, mix, texts),
        rate=rate,
        concurrency=concurrency,
        duration=10.0 if duration is None and requests is None else duration,
        requests=requests,
        timeout=timeout,
        name=mix,
        tracing=tracing.client_tracing(
            trace_ratio,
            format,
            otlp_endpoint,
            {
                "loadtest.mix": "targets file" if targets else mix,
                "loadtest.rate": rate or 0,
                "loadtest.trace_ratio": trace_ratio,
            }
            | ({} if rate else {"loadtest.concurrency": concurrency}),
        ),
    )
    if engine_name not in ENGINES:
        raise typer.BadParameter(f"--engine must be builtin, ab or vegeta, not '{engine_name}'")
    external.check(engine_name, spec)
    observe = _observer(metrics_port, {"rate": str(rate or 0), **labels(label)})
    results, stats = _run(engine_name, spec, procs, observe)
    run_dir = RunSettings().run_dir
    _log_end(run_log(run_dir), spec, stats, procs)
    output = output or new_results_file(run_dir)
    write_results(sorted(results, key=lambda r: r.seq), output)
    console.print(f"results: {output} (`loadtest report {output}`)", soft_wrap=True)
    if not results:
        console.print("no requests were sent")
        raise typer.Exit(1)
    if report == "text":
        print(text_report(summarize(results)))
    elif report == "json":
        print(json.dumps(summarize(results), indent=2))


def _targets(file: Path | None, url: str, format: str, mix: str, texts: int) -> list:
    """The targets file's requests, else `texts` sentences of MIX per request in FORMAT to URL."""
    if file is not None:
        return read_vegeta_targets(file)
    if mix not in MIXES:
        raise typer.BadParameter(f"--mix must be one of {', '.join(MIXES)}")
    try:
        return build_targets(url, format, MIXES[mix](max(200, texts * 50)), texts)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _observer(metrics_port: int | None, run_labels: dict[str, str]) -> engine.Callback | None:
    """With a port: the generator's Prometheus metrics served there, and the callback that feeds them."""
    if not metrics_port:
        return None
    from loadtest.metrics import GeneratorMetrics

    generator_metrics = GeneratorMetrics()
    generator_metrics.serve(metrics_port)
    return generator_metrics.observer(run_labels)


def _run(
    engine_name: str, spec: AttackSpec, procs: int, observe: engine.Callback | None
) -> tuple[list[Result], AttackStats]:
    """The attack on the chosen engine, behind a progress bar; every result also goes to `observe`."""
    results: list[Result] = []
    total = spec.total()
    columns = (TextColumn("[bold]attack"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
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
    return results, stats


def run_log(run_dir: Path) -> logging.Logger:
    """JSON lines into the running stack's log directory (RUN_DIR/logs/loadtest.log, rotated by size as the servers'
    own are: `SERVING_LOG_*`), so `serving logs` shows what the load generator did when; nowhere when no stack has
    written logs there."""
    from observability.logfile import LogFile
    from observability.logging import JsonFormatter
    from services.launcher.settings import LogFileSettings

    log = logging.getLogger("loadtest")
    log_dir = run_dir / "logs"
    if not log.handlers and log_dir.is_dir():
        rotation = LogFileSettings()
        handler = LogFile(log_dir / "loadtest.log", rotation.max_bytes, rotation.backups)
        handler.setFormatter(JsonFormatter(service="loadtest"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def _log_end(log: logging.Logger, spec: AttackSpec, stats: AttackStats, procs: int) -> None:
    """What ended the attack and the generator's warnings: printed, and logged into the run's log."""
    console.print(f"ended: {stats.ended_by(spec)}")
    log.info(
        "attack %s ended by %s",
        spec.name,
        stats.ended_by(spec),
        extra={"url": spec.targets[0].url, "requests": stats.sent, "rate": spec.rate, "concurrency": spec.concurrency},
    )
    for note in warnings_for(spec, stats, procs):
        console.print(f"[bold red]WARNING:[/] {note}")
        log.warning(note)


def report_command(
    files: list[Path] = typer.Argument(
        None, help="Result files (Vegeta JSON lines); default: the latest attack's, in <run dir>/results."
    ),
    type: str = typer.Option("text", help="text | json"),
) -> None:
    """Report over result files written by `attack` (or by `vegeta encode --to json`)."""
    if not files:
        run_dir = RunSettings().run_dir
        latest = newest_results(run_dir)
        if latest is None:
            raise typer.BadParameter(
                f"no attack results in {run_dir / 'results'}: run `loadtest attack`, or name files"
            )
        console.print(f"report over {latest}", soft_wrap=True)
        files = [latest]
    results = [r for f in files for r in read_results(f)]
    summary = summarize(results)
    print(text_report(summary) if type == "text" else json.dumps(summary, indent=2))


def payloads_command(
    tokenizer: Path = typer.Option(Path("build/model/tokenizer.json"), help="Model tokenizer."),
    as_json: bool = typer.Option(False, "--json", help="The histograms as JSON on stdout, for scripts."),
) -> None:
    """Token-length histogram of each sentence mix."""
    from services.common.cli_display import show, table

    if not tokenizer.is_file():
        raise FileNotFoundError(
            f"no tokenizer at {tokenizer.resolve()}: build the model (`make model`) or pass --tokenizer FILE"
        )
    histograms = {name: token_histogram(make(500), tokenizer) for name, make in MIXES.items()}
    if as_json:
        print(json.dumps(histograms, indent=2))
        return
    rows = table("tokens", *histograms)
    for bin_name in next(iter(histograms.values())):
        rows.add_row(bin_name, *(str(h[bin_name]) for h in histograms.values()))
    show(rows)
