"""`--help` of every `serving` and `loadtest` command at 80 columns: every option name whole, every command's
summary whole (the generated CLI reference takes the same summaries)."""

import re
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from loadtest.cli import app as loadtest_app
from services.cli import app as serving_app
from services.common.cli_display import summary


def commands(group: click.Command, path: tuple[str, ...] = ()):
    yield path, group
    for name, command in getattr(group, "commands", {}).items():
        if not command.hidden:
            yield from commands(command, (*path, name))


APPS = {"serving": serving_app, "loadtest": loadtest_app}
EVERY = [(name, path) for name, app in APPS.items() for path, _ in commands(typer.main.get_command(app))]


def whole(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(("script", "path"), EVERY, ids=[" ".join((s, *p)) for s, p in EVERY])
def test_help_at_80_columns_shows_every_option_and_summary_whole(script, path):
    root = typer.main.get_command(APPS[script])
    command = dict(commands(root))[path]
    shown = CliRunner().invoke(APPS[script], [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80).output
    assert max(len(line) for line in shown.splitlines()) <= 80, shown
    for param in command.params:
        if getattr(param, "hidden", False):
            continue  # not for people (`serving up --via-make`: what `make up` sets)
        for name in [*param.opts, *param.secondary_opts]:
            if name.startswith("-"):
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", shown), f"{name} cut in:\n{shown}"
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            first = summary(sub.help)
            assert first and whole(first) in whole(shown), f"{name}'s summary cut in:\n{shown}"


LISTINGS = [
    ("serving", ("status",)),
    ("serving", ("logs",)),
    ("serving", ("analyze",)),
    ("serving", ("model", "list")),
    ("serving", ("endpoints", "list")),
    ("serving", ("metrics", "list")),
    ("loadtest", ("payloads",)),
]


@pytest.mark.parametrize(("script", "path"), LISTINGS, ids=[" ".join((s, *p)) for s, p in LISTINGS])
def test_every_listing_has_json(script, path):
    command = dict(commands(typer.main.get_command(APPS[script])))[path]
    assert any("--json" in param.opts for param in command.params)


def test_serving_trains_help_says_what_it_does_and_its_time_is_one_measured_figure_in_the_docs():
    from services.commands.lifecycle.registry import train

    assert not re.search(r"\d+ (min|s)\b|measured", train.__doc__), train.__doc__
    root = Path(__file__).parents[3]
    record = " ".join((root / "docs/decisions/measured-defaults.md").read_text().split())
    figure = re.search(r"`serving train`.*?(\d+ min \d+ s)", record)[1]
    for page in ("docs/lifecycle.md", "docs/troubleshooting.md"):
        text = " ".join((root / page).read_text().split())
        assert re.findall(r"`serving train`[^.]*?(\d+ min \d+ s)", text) == [figure], page
