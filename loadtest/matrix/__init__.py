"""The one benchmark driver (`loadtest matrix`, `loadtest bench`). For each STACK x WORKERS x BATCHING x PADDING in
a matrix file (`loadtest/matrices/*.toml`): bring the stack up with the launcher `make up` uses, warm up, measure its
saturated throughput (closed loop) and the CPU its processes spend per request, attack it open loop at fractions of
that throughput, take it down; then write results/<run-id>/ with raw results, summary CSV/JSON, machine info and a
Markdown report with charts.

- `config`: the matrix file and the configurations it expands into;
- `measure`: one configuration in one round, against its running stack;
- `traces`: a traced configuration's spans, kept and analysed;
- `summary`: rounds to medians, the ceiling references to one;
- `report`: summary.json/.csv, machine.json, the charts and report.md;
- `run`: the rounds, the ceiling around them, the outputs (and `replot`).
"""
