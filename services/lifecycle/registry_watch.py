"""Whether the registry answers, as the controller and each replica agent follow it: asked once a tick, said once
when it stops answering (with what goes on and what waits) and once when it answers again, never once a tick."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from services.lifecycle.ports import Registry


class RegistryWatch:
    def __init__(
        self, registry: Registry, log: logging.Logger, waits: str, clock: Callable[[], float] = time.monotonic
    ):
        """`waits`: what the caller does while the registry is away, as the warning says it."""
        self.registry, self.log, self.waits, self.clock = registry, log, waits, clock
        self.away_since: float | None = None

    @property
    def up(self) -> bool:
        return self.away_since is None

    def check(self) -> bool:
        """Ask the registry whether it answers; True on the tick it answers again (what waited can go at once)."""
        try:
            self.registry.ping()
        except Exception as exc:  # noqa: BLE001 - refused, timed out, an error page: away all the same
            if self.away_since is None:
                self.away_since = self.clock()
                self.log.warning("%s; %s until it answers again", exc, self.waits)
            return False
        if self.away_since is None:
            return False
        self.log.info("the registry answers again after %.0fs", self.clock() - self.away_since)
        self.away_since = None
        return True
