"""What a server serves, by name: the stack's built-in endpoint first, then the endpoints its resolver finds
(registry-deployed versions, configured pipelines). Each endpoint's kind (`EndpointKind`) comes with the run it
inherits; a name that resolves to nothing is a NotFound listing what is served, so a caller learns the right name
from the error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.common.backend import (
    EndpointKind,
    EndpointResolver,
    ModelEndpoint,
    NoConfiguredEndpoints,
    PipelineEndpoint,
    ServedModel,
)
from services.common.errors import NotFound
from services.common.names import shown

if TYPE_CHECKING:
    from services.api.dataplane import SingleModelEndpoint


class Catalog:
    def __init__(self, builtin: SingleModelEndpoint | None, endpoints: EndpointResolver | None = None):
        self.builtin = builtin
        """The stack's built-in endpoint (its one version is `builtin.model`)."""
        self.endpoints = endpoints or NoConfiguredEndpoints()

    def names(self) -> list[str]:
        return ([self.builtin.name] if self.builtin else []) + self.endpoints.names()

    def _not_found(self, what: str) -> NotFound:
        names = self.names()
        serves = ", ".join(f"'{n}'" for n in names) if names else "no endpoint yet"
        return NotFound(f"{what}; this server serves {serves}")

    def resolve(self, endpoint: str) -> ModelEndpoint | PipelineEndpoint:
        """The endpoint of that name (the built-in one first), or NotFound listing what is served."""
        if self.builtin and endpoint == self.builtin.name:
            return self.builtin
        found = self.endpoints.resolve(endpoint)
        if found is None:
            raise self._not_found(f"no endpoint {shown(endpoint)}")
        return found

    def find(self, endpoint: str) -> tuple[ModelEndpoint | PipelineEndpoint, Any]:
        """The endpoint of that name (NotFound listing what is served) and the custom statistics declared for it."""
        return self.resolve(endpoint), self.endpoints.declared(endpoint)

    def model_for(self, endpoint: str, version: str | None = None, routing_key: str | None = None) -> ServedModel:
        """The model version that answers `endpoint` (and `version`, if given) now; NotFound for a pipeline, which
        only `/serve` runs."""
        found = self.resolve(endpoint)
        if found.kind is not EndpointKind.MODEL:
            raise NotFound(f"endpoint '{endpoint}' runs preprocess code; call it at /serve/{endpoint}")
        return found.choose(version, routing_key)

    def models(self) -> dict[str, list[ServedModel]]:
        """Every name `model_named` accepts, with the live versions it may answer with: the built-in model under its
        own name and its endpoint's, then each model endpoint (a pipeline names no model)."""
        found: dict[str, list[ServedModel]] = {}
        if self.builtin:
            model = self.builtin.model
            found[model.manifest.name] = found[self.builtin.name] = [model]
        for name in self.endpoints.names():
            endpoint = self.endpoints.resolve(name)
            if name in found or endpoint is None or endpoint.kind is not EndpointKind.MODEL:
                continue
            if versions := [endpoint.choose(version, None) for version in endpoint.versions()]:
                found[name] = versions
        return found

    def model_named(self, name: str | None) -> ServedModel:
        """For APIs that name a model (OpenAI `model`): an endpoint name, the built-in model's name, or nothing."""
        if self.builtin and name in (None, "", self.builtin.model.manifest.name):
            return self.builtin.model
        if name in (None, ""):
            raise self._not_found("no default model")
        try:
            return self.model_for(name)
        except NotFound:
            raise self._not_found(f"no model {shown(name)}") from None
