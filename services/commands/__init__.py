"""The `serving` commands, one module per job: `stack` (up, down), `status`, `logs`, `analyze`, `observability`,
`model` (build, tiny, model-repo). `services.cli` assembles them, with the gateway's and the lifecycle's commands,
into the console script."""
