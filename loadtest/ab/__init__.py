"""`loadtest ab` (`make bench-ab BASE=<rev>`): a revision raced against this checkout on the same machine, in
interleaved rounds, as `asv continuous` and pyperf's `compare_to` decide from interleaved runs.

- `plan`: the configurations, the models, the interleaved order of the steps;
- `trees`: HEAD and BASE (a `git worktree`), each with the environment that runs its own code;
- `models`: each tree's models from its own builder;
- `stack`: one tree's stack up (`serving up --detach`) and down, on free ports;
- `run`: the steps, with progress and an ETA; `race`: everything in order;
- `compare`: ratios, medians, ranges and verdicts; `report`: the table, report.md.
"""
