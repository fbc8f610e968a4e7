"""What the command-line tools show a person, at any terminal width down to 80 columns: help that never cuts an
option name or a command's summary, and tables that never break a word and mark every cut cell with an ellipsis
(`--json` gives every listing whole, for scripts)."""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Column, Table

GAP = 2
"""Columns of a `table` are this many spaces apart (its separator and its padding)."""
WRAPPED = 24
"""The width a column that wraps (prose, a path) asks for before the others have theirs."""
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


def typer_app(**settings: Any) -> typer.Typer:
    """A Typer app whose `--help` is Click's plain layout: an option name too long for its column pushes the help
    onto the next line instead of being cut (Typer's rich panels cut names at 80 columns)."""
    return typer.Typer(rich_markup_mode=None, **settings)


def summary(text: str | None) -> str | None:
    """The first sentence of a docstring or help text, whole."""
    if not text:
        return None
    paragraph = inspect.cleandoc(text).split("\n\n")[0]
    return SENTENCE_END.split(" ".join(paragraph.split()), maxsplit=1)[0]


def whole_summaries(app: typer.Typer) -> typer.Typer:
    """Give every command and group of `app` (recursively) its first sentence as its summary, where Click would cut
    its help to 45 characters and an ellipsis (`--help`'s command list, the generated CLI reference)."""
    for command in app.registered_commands:
        if command.short_help is None:
            command.short_help = summary(command.help or inspect.getdoc(command.callback))
    for group in app.registered_groups:
        sub = group.typer_instance
        if sub is None:
            continue
        whole_summaries(sub)
        help_text = _value(group.help) or _value(sub.info.help)
        if _value(group.short_help) is None and _value(sub.info.short_help) is None:
            group.short_help = summary(help_text)
    return app


def _value(setting: Any) -> Any:
    """A Typer setting's value, whether given or still Typer's placeholder for its default."""
    return getattr(setting, "value", setting)


def table(*headers: str, prose: tuple[str, ...] = (), whole: tuple[str, ...] = ()) -> Table:
    """A listing's table: columns two spaces apart under a rule. A cell is never broken inside a word: one too long
    for its column is cut with an ellipsis; the columns named in `prose` wrap between words (a word too long for
    the column is cut with an ellipsis); those named in `whole` (paths, no use cut) fold onto more lines. `show`
    sizes the columns to the terminal."""
    columns = [
        Column(
            header,
            no_wrap=header not in prose + whole,
            overflow="fold" if header in whole else "ellipsis",
        )
        for header in headers
    ]
    return Table(*columns, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))


def fit(listing: Table, width: int) -> Table:
    """Size `listing`'s columns (a `table`) to `width`: when the cells do not fit, the widest columns give way first,
    none narrower than its header, so a header is never broken."""
    columns = listing.columns
    budget = width - GAP * (len(columns) - 1)
    floors = [cell_len(str(column.header)) for column in columns]
    longest = [
        max([floor, *(cell_len(str(cell)) for cell in column.cells)])
        for floor, column in zip(floors, columns, strict=True)
    ]
    if sum(longest) <= budget:
        return listing
    # A column that wraps asks for a few words' width at first, and gets what is left over at the end.
    needs = [
        min(size, max(floor, WRAPPED)) if not c.no_wrap else size
        for floor, size, c in zip(floors, longest, columns, strict=True)
    ]

    def widths(cap: int) -> list[int]:
        return [max(floor, min(need, cap)) for floor, need in zip(floors, needs, strict=True)]

    low, high = 0, max(needs)
    while low < high:  # the largest cap at which the columns fit
        middle = (low + high + 1) // 2
        low, high = (middle, high) if sum(widths(middle)) <= budget else (low, middle - 1)
    sized = widths(low)
    for wanted in (needs, longest):  # what is left: to the columns cut shortest first, then to those that wrap
        spare = budget - sum(sized)
        for i, size in enumerate(wanted):
            grow = max(0, min(spare, size - sized[i]))
            sized[i], spare = sized[i] + grow, spare - grow
    for column, size in zip(columns, sized, strict=True):
        column.width = size
    return listing


WIDE = 10_000
"""Columns of a `--wide` table: as many as its longest line needs (a table only takes the width its cells need)."""


def report_console(wide: bool) -> Console:
    """Where a report prints: one line per row with `--wide`, and when the output is no terminal and `COLUMNS` gives
    no width (a pipe, a file, `make status` in a CI log: rich would assume 80 columns and fold every path over
    several lines); on a terminal, its width."""
    console = Console()
    if wide or (not console.is_terminal and "COLUMNS" not in os.environ):
        return Console(width=WIDE)
    return console


def show(listing: Table, console: Console | None = None) -> None:
    """Print a `table` sized to the terminal, its cells as typed: no markup, no emoji codes."""
    console = console or Console(emoji=False, markup=False)
    console.print(fit(listing, console.width))
