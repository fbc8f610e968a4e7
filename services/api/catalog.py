"""What a server serves, by name: the stack's built-in endpoint first, then its sources' endpoints, the sources asked
in order (the gateway's deployment state before its endpoint file, so a name deployed from the registry wins over a
configured endpoint of the same name). A name that resolves to nothing is a NotFound listing what is served, so a
caller learns the right name from the error; a name a source has versions of that are still being loaded (and no
source serves yet) is a 503 with Retry-After, so a caller retries instead of giving up."""

from __future__ import annotations

from collections.abc import Sequence

from services.api.endpoint import Endpoint, EndpointSource, ModelEndpoint, SingleModelEndpoint, still_loading
from services.common.backend import ServedModel
from services.common.errors import NotFound
from services.common.names import shown
from services.monitoring.statistics import EndpointMetrics


class Catalog:
    def __init__(self, builtin: SingleModelEndpoint | None, sources: Sequence[EndpointSource] = ()):
        self.builtin = builtin
        """The stack's built-in endpoint (its one version is `builtin.model`)."""
        self.sources = tuple(sources)

    def names(self) -> list[str]:
        """Every endpoint served now (for 404 messages and readiness)."""
        builtin = [self.builtin.name] if self.builtin else []
        return builtin + [name for source in self.sources for name in source.names()]

    def errors(self) -> dict[str, str]:
        """Configuration problems of every source: what is not served, and why."""
        return {key: error for source in self.sources for key, error in source.errors().items()}

    def health(self) -> dict[str, str]:
        """What `/health/ready` adds about the sources (the deployment state store's reachability)."""
        return {key: value for source in self.sources for key, value in source.health().items()}

    def _not_found(self, what: str) -> NotFound:
        names = self.names()
        serves = ", ".join(f"'{n}'" for n in names) if names else "no endpoint yet"
        return NotFound(f"{what}; this server serves {serves}")

    def _in_sources(self, endpoint: str) -> Endpoint | None:
        for source in self.sources:
            if (found := source.current().by_name.get(endpoint)) is not None:
                return found
        return None

    def _loading(self, endpoint: str) -> tuple[str, ...]:
        """The versions of `endpoint` being loaded, by the first source that has any."""
        return next((found for source in self.sources if (found := source.current().loading.get(endpoint))), ())

    def resolve(self, endpoint: str) -> Endpoint:
        """The endpoint of that name (the built-in one first); Unavailable (503, Retry-After) while a source is still
        loading its versions; else NotFound listing what is served."""
        if self.builtin and endpoint == self.builtin.name:
            return self.builtin
        found = self._in_sources(endpoint)
        if found is None:
            if versions := self._loading(endpoint):
                raise still_loading(endpoint, versions)
            raise self._not_found(f"no endpoint {shown(endpoint)}")
        return found

    def declared(self, endpoint: str) -> EndpointMetrics | None:
        """The custom statistics declared for `endpoint` (by the first source that declares any), or None."""
        for source in self.sources:
            if (found := source.current().declared.get(endpoint)) is not None:
                return found
        return None

    def find(self, endpoint: str) -> tuple[Endpoint, EndpointMetrics | None]:
        """The endpoint of that name (NotFound listing what is served) and the custom statistics declared for it."""
        return self.resolve(endpoint), self.declared(endpoint)

    def model_endpoint(self, endpoint: str) -> ModelEndpoint:
        """The model endpoint of that name; NotFound for a pipeline, which only `/serve` runs."""
        found = self.resolve(endpoint)
        if not isinstance(found, ModelEndpoint):
            raise NotFound(f"endpoint '{endpoint}' runs preprocess code; call it at /serve/{endpoint}")
        return found

    def model_for(self, endpoint: str, version: str | None = None, routing_key: str | None = None) -> ServedModel:
        """The model version that answers `endpoint` (and `version`, if given) now; NotFound for a pipeline."""
        return self.model_endpoint(endpoint).choose(version, routing_key)

    def models(self) -> dict[str, list[ServedModel]]:
        """Every name `model_named` accepts, with the live versions it may answer with: the built-in model under its
        own name and its endpoint's, then each model endpoint (a pipeline names no model)."""
        found: dict[str, list[ServedModel]] = {}
        if self.builtin:
            model = self.builtin.model
            found[model.manifest.name] = found[self.builtin.name] = [model]
        for name in self.names():
            if name in found or not isinstance(endpoint := self._in_sources(name), ModelEndpoint):
                continue
            if versions := [endpoint.choose(version, None) for version in endpoint.versions()]:
                found[name] = versions
        return found

    def model_named(self, name: str | None) -> ServedModel:
        """For APIs that name a model (OpenAI `model`): an endpoint name, the built-in model's name, or nothing."""
        if self.builtin and name in (None, "", self.builtin.model.manifest.name):
            return self.builtin.model
        if not name:
            raise self._not_found("no default model")
        try:
            return self.model_for(name)
        except NotFound:
            raise self._not_found(f"no model {shown(name)}") from None

    async def start(self) -> None:
        for source in self.sources:
            await source.start()

    async def stop(self) -> None:
        for source in self.sources:
            await source.stop()
