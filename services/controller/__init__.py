"""The lifecycle controller (`serving controller`, started by `make up STACK=clearml`): reconciles the deployment
state with the registry and Triton, one endpoint at a time, once a second.

- auto-update (`deploy`): a new registry version of the endpoint's model is fetched, verified (artifact hashes,
  tensor contract, a forward pass), placed into Triton's repository as a new version, loaded, warmed up and checked
  through Triton, and only then made live; a version that fails any step is never given traffic and its registry
  version is tagged `deployment=rejected` with the reason;
- Triton kept in step (`triton_sync`): versions beyond the newest `max_versions` are drained (no new traffic, then
  unloaded once the gateway's workers have all seen the change); versions the state calls live but Triton does not
  serve (Triton restarted) are loaded again;
- rollouts (`rollouts`): traffic moves step by step and each step is judged from the gateway's per-version metrics;
  a breach sends all traffic back to the stable version and tags the registry version `rollout=rejected`.

Each step reads the state, acts, and writes its result back through `transitions` under the state's lock, so the
admin API can change the state at any time and a killed controller, restarted, carries on from the file. The loop
(`loop`) runs the steps with backoff; `process` builds the real collaborators behind the Protocols of `ports`.
"""

from services.controller.loop import Controller
from services.controller.process import main

__all__ = ["Controller", "main"]
