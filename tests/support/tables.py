"""Reading back a table the CLI printed (`services.common.cli_display.table`): each row's cells, each cell as the
lines it takes."""

from __future__ import annotations


def read_table(output: str, headers: list[str]) -> list[dict[str, list[str]]]:
    """The rows under the header line that names `headers` in order; a cell is the list of its non-empty lines. The
    table's lines all have the header line's length (a line of another length ends it)."""
    lines = output.splitlines()
    top = next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == headers[0].split()[0])
    starts, at = [], 0
    for header in headers:
        at = lines[top].index(header, at)
        starts.append(at)
    ends = [start for start in starts[1:]] + [None]
    rows: list[dict[str, list[str]]] = []
    for line in lines[top + 2 :]:
        if len(line) != len(lines[top]):
            break
        cells = [line[start:end].strip() for start, end in zip(starts, ends, strict=True)]
        if cells[0] or not rows:
            rows.append({header: [] for header in headers})
        for header, cell in zip(headers, cells, strict=True):
            if cell:
                rows[-1][header].append(cell)
    return rows
