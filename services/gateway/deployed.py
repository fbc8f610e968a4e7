"""Registry-deployed endpoints: the live versions the lifecycle controller put into Triton, each with its own
tokenizer and manifest, and the endpoint's traffic policy (newest version, canary split or rollout step). The shared
deployment state is followed by a `state_source.StoreWatcher`, which serves a `DeployedEndpoints` snapshot of it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.api.dataplane import ModelRun
from services.common.backend import ServedModel
from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.errors import NotFound
from services.common.names import shown
from services.common.tokenization import TextTokenizer
from services.gateway.backend import TritonBackend
from services.lifecycle.routing import effective_weights, pick
from services.lifecycle.state import Deployments, EndpointState
from services.monitoring.statistics import EndpointMetrics
from services.triton.grpc_client import TritonClient


class VersionedEndpoint(ModelRun):
    """A `ModelEndpoint` of several live versions: a request names one, or the weights pick one by its key."""

    def __init__(self, name: str, models: dict[str, ServedModel], weights: dict[str, float]):
        self.name = name
        self.models = models
        self.weights = weights

    def versions(self) -> list[str]:
        return sorted(self.models, key=int)

    def choose(self, version: str | None, routing_key: str | None) -> ServedModel:
        if version is not None:
            if version not in self.models:
                live = ", ".join(self.versions()) or "none yet"
                raise NotFound(f"endpoint '{self.name}' has no live version {shown(version)}; live: {live}")
            return self.models[version]
        return self.models[pick(self.weights, routing_key)]


class DeployedEndpoints:
    """An immutable snapshot of the deployment state's live versions, built in one go (an `EndpointSet`: the state
    declares no statistics, names no other files, and loads no user code to unload)."""

    def __init__(self, endpoints: dict[str, VersionedEndpoint]):
        self.endpoints = endpoints
        self.errors: dict[str, str] = {}
        self.metrics: dict[str, EndpointMetrics] = {}

    def get(self, name: str) -> VersionedEndpoint | None:
        return self.endpoints.get(name)

    def names(self) -> list[str]:
        return sorted(self.endpoints)

    def source_stamps(self) -> tuple:
        return ()

    def read_stamps(self) -> tuple:
        return ()

    def unload(self) -> None:
        """Nothing to release: a version no longer live is freed once its last request is done with it."""

    @classmethod
    def build(
        cls,
        state: Deployments,
        triton: TritonClient,
        buckets: list[int] | None,
        locate: Callable[[str, EndpointState, str], Path],
        cache: dict[tuple[str, str], ServedModel] | None = None,
        on_new_version=None,
    ) -> DeployedEndpoints:
        """Versions already loaded by an earlier snapshot (`cache`) are reused: a traffic change costs no reload.
        `locate(endpoint, state, version)` is where a version's manifest and tokenizer are on this host
        (`version_files`: never the state's `model_dir` as given)."""
        cache = {} if cache is None else cache
        endpoints, used = {}, set()
        for name, endpoint in state.endpoints.items():
            models = {}
            for version in endpoint.live():  # every live version answers /serve/{endpoint}/{version}
                key = (name, version)
                if key not in cache:
                    model_dir = locate(name, endpoint, version)
                    manifest = Manifest.load(model_dir)
                    tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length, buckets)
                    run_id = endpoint.versions[version].lineage.get("run", {}).get("id")
                    backend = TritonBackend(triton, name, manifest, version)
                    cache[key] = ServedModel(name, version, manifest, tokenizer, backend, run_id)
                    if on_new_version is not None:  # e.g. the drift reference computed from its data set
                        on_new_version(name, version, model_dir)
                models[version] = cache[key]
                used.add(key)
            if models:
                endpoints[name] = VersionedEndpoint(name, models, effective_weights(endpoint))
        for key in set(cache) - used:  # versions no longer live
            del cache[key]
        return cls(endpoints)
