"""Rollouts: traffic moved to a new version step by step, each step judged on the fleet's metrics.

`windows` (the per-version counters a step is judged on, and their windows), `judge` (the judgement of one step),
`transitions` (the rules that move a running rollout on, applied under the state's lock), `plan` (what a rollout
will judge, in words). The controller drives them (`services.controller.rollouts`)."""
