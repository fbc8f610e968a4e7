"""Tables and help as a person meets them in an 80-column terminal: no word broken, every cut marked."""

from io import StringIO

import pytest
from rich.console import Console

from services.common.cli_display import show, summary, table
from tests.support.tables import read_table

HEADERS = ["endpoint", "version", "state", "traffic", "req/s", "registry", "run", "reason"]
ROWS = [
    ["sentiment-classifier", "12", "live", "90%", "123.4", "sentiment-classifier-long v12", "abcdef123456",
     "promoted after a rollout of 3 steps with no breach of the p99 ratio"],
    ["minilm", "1", "draining", "10%", "0", "minilm v1", "abcdef123456", ""],
]  # fmt: skip


def render(width: int, **columns) -> str:
    listing = table(*HEADERS, **columns)
    for row in ROWS:
        listing.add_row(*row)
    out = StringIO()
    show(listing, Console(file=out, width=width, emoji=False, markup=False))
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 100, 200])
def test_no_cell_breaks_a_word_and_every_cut_cell_ends_in_an_ellipsis(width):
    output = render(width, prose=("reason",))
    assert max(len(line) for line in output.splitlines()) <= width, output
    rows = read_table(output, HEADERS)
    assert len(rows) == len(ROWS), output
    for row, values in zip(rows, ROWS, strict=True):
        for header, value in zip(HEADERS, values, strict=True):
            lines = row[header]
            if header == "reason":  # prose wraps between words
                words = [word.removesuffix("…") for line in lines for word in line.split()]
                assert all(word and word in value.split() or value.split()[0].startswith(word) for word in words)
                continue
            assert len(lines) <= 1, f"{header} broken over lines:\n{output}"
            shown = lines[0] if lines else ""
            assert shown == value or (shown.endswith("…") and value.startswith(shown[:-1])), output


def test_at_80_columns_the_longest_cells_give_way_and_headers_stay_whole():
    output = render(80, prose=("reason",))
    header_line = output.splitlines()[0]
    assert header_line.split() == [word for header in HEADERS for word in header.split()], output
    (first, _) = read_table(output, HEADERS)
    assert first["version"] == ["12"] and first["state"] == ["live"] and first["req/s"] == ["123.4"]
    assert first["endpoint"][0].endswith("…"), "the long name is cut, and says so"


def test_a_path_column_folds_whole():
    listing = table("process", "log", whole=("log",))
    path = "/a/run/directory/whose/path/is/longer/than/any/terminal/is/wide/" * 2 + "gateway.log"
    listing.add_row("gateway", path)
    out = StringIO()
    show(listing, Console(file=out, width=80))
    (row,) = read_table(out.getvalue(), ["process", "log"])
    assert "".join(row["log"]) == path


def test_a_summary_is_the_first_sentence_whole():
    text = """Example pipeline: fine-tune a sentiment classifier (e.g. on the shipped data set) and register it.

    More detail here."""
    assert (
        summary(text)
        == "Example pipeline: fine-tune a sentiment classifier (e.g. on the shipped data set) and register it."
    )
    assert summary("Start a stack. Then more.") == "Start a stack."
    assert summary(None) is None
