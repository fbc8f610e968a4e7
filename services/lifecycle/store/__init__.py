"""The shared deployment state store: which registry versions each endpoint has (`services.lifecycle.deployments`),
and which versions each Triton replica holds ready (`replica_reports`).

The desired state is one JSON document with a revision number, in a database every process reaches
(`SERVING_STATE_URL`): embedded SQLite under the run directory by default (`make up` starts no extra server),
PostgreSQL for a fleet (the registry's database server, tables of its own). The controller and the admin API change it
with `DeploymentStore.update` (compare-and-swap on the revision, retried); gateway workers poll `stamp()` and rebuild
their endpoints when it moved, so a traffic change reaches every worker within a poll interval and no request waits
for it.

Every store remembers the newest state it read (`memory`) and raises `StateLost` instead of returning a state
that is gone or older (`rules`): a store that lost its state is not an empty state. A state that breaks a rule
of `deployments` (a name, a version, a bound) is refused whole (`StateInvalid`, naming the fields), is never
remembered, and is never written: `update` refuses a change that would make one.

The modules: `deployment_store` (`DeploymentStore`), `db` (tables, URLs, connections), `memory` (the newest state a
process or host read), `rules` (when a store lost its state: pure rules), `backup` (`serving state backup`,
`restore`, `accept`), `replica_reports`.
"""

from services.lifecycle.store.db import StateLost, StateReadOnly, StateStoreUnavailable
from services.lifecycle.store.deployment_store import DeploymentStore
from services.lifecycle.store.rules import Stamp

__all__ = ["DeploymentStore", "Stamp", "StateLost", "StateReadOnly", "StateStoreUnavailable"]
