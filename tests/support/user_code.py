"""Where the unit tests' synchronous user code runs (`services.gateway.user_threads`)."""

from services.gateway.user_threads import UserThreads

THREADS = UserThreads(8, stuck_after=60.0)
