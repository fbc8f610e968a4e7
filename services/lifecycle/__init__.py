"""The model lifecycle: deployment state (`state`), the rules that change it (`transitions`), traffic policy (canary,
rollout: `routing`, `rollout`), the controller that deploys registry versions into Triton (`controller`), the admin
API (`admin`) and the `serving model ...` commands.

The gateway's workers import only `state`, `transitions`, `routing` and `admin` (no registry client, no model-control
client). The controller runs in its own process (`serving controller`); it is the only part that acts on Triton's
model-control API and the only serving part that talks to the registry (MLflow): it reads versions and their
lineage, which it copies into the state (what `GET /models/{endpoint}` shows), and tags and promotes versions. The
`serving model register` and `serving train` commands write to the registry directly, outside any serving process.
"""
