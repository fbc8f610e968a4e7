"""The model lifecycle: the deployment state (`deployments`: phases, rollouts, policies, as data), the rules that
change it (`transitions`), the store that keeps it (`store`), traffic policy (`routing`, and why each version gets
its share: `shares`), rollouts (`rollouts`), placement on replicas (`placement`); the controller that deploys
registry versions into Triton (`services.controller`), the admin API (`services.gateway.admin`) and the
`serving model ...` commands use them.

The gateway's workers import only `deployments`, `store`, `transitions` and `routing` (no registry client, no
model-control client). The controller runs in its own process (`serving controller`); it is the only part that acts
on Triton's model-control API and the only serving part that talks to the registry (MLflow): it reads versions and
their lineage, which it copies into the state (what `GET /models/{endpoint}` shows), and tags and promotes versions.
The `serving model register` and `serving train` commands write to the registry directly, outside any serving
process.
"""
