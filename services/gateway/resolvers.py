"""The gateway's endpoint resolver: its watchers asked in order (deployed endpoints first, then configured ones),
so a name deployed from the registry wins over a configured endpoint of the same name."""

from __future__ import annotations

from services.common.backend import EndpointResolver, ModelEndpoint, PipelineEndpoint
from services.monitoring.statistics import EndpointMetrics


class ChainedResolver:
    def __init__(self, *resolvers: EndpointResolver):
        self.resolvers = resolvers

    def resolve(self, name: str) -> ModelEndpoint | PipelineEndpoint | None:
        for resolver in self.resolvers:
            found = resolver.resolve(name)
            if found is not None:
                return found
        return None

    def names(self) -> list[str]:
        return [name for resolver in self.resolvers for name in resolver.names()]

    def errors(self) -> dict[str, str]:
        return {key: error for resolver in self.resolvers for key, error in resolver.errors().items()}

    def health(self) -> dict[str, str]:
        return {key: value for resolver in self.resolvers for key, value in resolver.health().items()}

    def declared(self, name: str) -> EndpointMetrics | None:
        return next((found for r in self.resolvers if (found := r.declared(name)) is not None), None)

    async def start(self) -> None:
        for resolver in self.resolvers:
            await resolver.start()

    async def stop(self) -> None:
        for resolver in self.resolvers:
            await resolver.stop()
