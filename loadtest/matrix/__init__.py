"""The one benchmark driver (`loadtest matrix`, `loadtest bench`). For each STACK x WORKERS x BATCHING x PADDING in
a matrix file (`loadtest/matrices/*.toml`): bring the stack up with the launcher `make up` uses, warm up, measure its
saturated throughput (closed loop) and the CPU its processes spend per request, search the highest open-loop rate
whose p99 stays under the latency bound, attack it open loop at fractions of the saturated throughput, take it down;
then write results/<run-id>/ with raw results, summary CSV/JSON, machine info and a Markdown report with charts.

- `config`: the matrix file and the configurations it expands into;
- `measure`: one configuration in one round, against its running stack;
- `traces`: a traced configuration's spans, kept and analysed;
- `summary`: rounds to medians, the ceiling references to one;
- `ranking`: the configurations by their rate at the bound, the yardstick, the order the rounds allow;
- `goals`: the gateway's goals against the yardstick;
- `report`: summary.json/.csv, machine.json, the charts and report.md;
- `run`: the rounds, the ceiling around them, the outputs (and `replot`).
"""
