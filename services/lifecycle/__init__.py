"""The model lifecycle on the gateway: deployment state, traffic policy (canary, rollout), the controller that
deploys registry versions into Triton, and the admin API the `serving model ...` commands talk to.

Only `state`, `routing` and `admin` are imported by the gateway's workers; the controller runs in its own process
(`serving controller`) and is the only part that talks to the registry (MLflow) and to Triton's model-control API.
"""
