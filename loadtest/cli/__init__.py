"""`loadtest`: attack a stack and report, Vegeta-style; run the benchmark matrix, the tuning, the overload and the
soak; race two revisions. One module per group of commands (`attack`, `bench`, `overload`, `ab`), registered here in
the order `--help` lists them."""

from __future__ import annotations

from loadtest.cli import ab, attack, bench, overload
from services.common.cli_display import typer_app, whole_summaries

app = typer_app(
    help="Open-loop (Vegeta-style) and closed-loop (ab-style) load tests of the serving stacks.", no_args_is_help=True
)
app.command("attack")(attack.attack_command)
app.command("report")(attack.report_command)
app.command("matrix")(bench.matrix_command)
app.command("overload")(overload.overload_command)
app.command("soak")(overload.soak_command)
app.command("tune")(bench.tune_command)
app.command("bench")(bench.bench_command)
app.command("plot")(bench.plot_command)
app.command("ab")(ab.ab_command)
app.command("payloads")(attack.payloads_command)
whole_summaries(app)


def main() -> None:
    """The console script: user errors end in one line and exit code 2 (`--debug` for the traceback)."""
    from services.common.cli import run

    run(app)
