"""Registry-deployed endpoints: the live versions the lifecycle controller put into Triton, each with its own
tokenizer and manifest, and the endpoint's traffic policy (newest version, canary split or rollout step). The shared
deployment state is followed by a `state_source.StoreWatcher`, which serves the snapshot `build_deployed` makes of
it, with the versions still being loaded (a request for one is a 503 to retry, not a 404)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.api.endpoint import Endpoints, ModelEndpoint, still_loading
from services.common.backend import ServedModel
from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.errors import NotFound
from services.common.names import shown
from services.common.tokenization import TextTokenizer
from services.gateway.backend import TritonBackend
from services.lifecycle.deployments import Deployments, EndpointState, Phase
from services.lifecycle.routing import effective_weights, pick
from services.triton.grpc_client import TritonClient


class VersionedEndpoint(ModelEndpoint):
    """A model endpoint of several live versions: a request names one, or the weights pick one by its key. A version
    being loaded (`loading`), asked for by number, is a 503 to retry, not a 404."""

    def __init__(
        self, name: str, models: dict[str, ServedModel], weights: dict[str, float], loading: tuple[str, ...] = ()
    ):
        self.name = name
        self.models = models
        self.weights = weights
        self.loading = loading

    def versions(self) -> list[str]:
        return sorted(self.models, key=int)

    def choose(self, version: str | None, routing_key: str | None) -> ServedModel:
        if version is not None:
            if version not in self.models:
                if version in self.loading:
                    raise still_loading(self.name, [version])
                live = ", ".join(self.versions()) or "none yet"
                raise NotFound(f"endpoint '{self.name}' has no live version {shown(version)}; live: {live}")
            return self.models[version]
        return self.models[pick(self.weights, routing_key)]


def build_deployed(
    state: Deployments,
    triton: TritonClient,
    buckets: list[int] | None,
    locate: Callable[[str, EndpointState, str], Path],
    cache: dict[tuple[str, str], ServedModel] | None = None,
    on_new_version: Callable[[str, str, Path], object] | None = None,
) -> Endpoints:
    """The state's live versions, as one snapshot (the state declares no statistics), with the versions being loaded
    (`Endpoints.loading`, and each endpoint's own for a request that names one). Versions already loaded by an
    earlier snapshot (`cache`) are reused: a traffic change costs no reload; a version no longer live is freed once
    its last request is done with it.
    `locate(endpoint, state, version)` is where a version's manifest and tokenizer are on this host
    (`version_files`: never the state's `model_dir` as given)."""
    cache = {} if cache is None else cache
    endpoints, used, loading = {}, set(), {}
    for name, endpoint in state.endpoints.items():
        pending = tuple(sorted((v for v, s in endpoint.versions.items() if s.state == Phase.LOADING), key=int))
        if pending:
            loading[name] = pending
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
            endpoints[name] = VersionedEndpoint(name, models, effective_weights(endpoint), pending)
    for key in set(cache) - used:  # versions no longer live
        del cache[key]
    return Endpoints(endpoints, loading=loading)
