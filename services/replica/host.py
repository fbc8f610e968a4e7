"""A Triton host as one process (`serving triton-agent`): the replica agent, and the wheel's tritonserver as its
child, started (and started again when it dies or wedges) only after the agent has placed every live version.

The server is the launcher's `ProcessSpec` of every stack's Triton (`server.triton_process`), in explicit
model-control mode; its `prepare` hook, run by the launcher before each start, is the agent's `prepare`, and adds a
`--load-model` for every deployed model it placed: tritonserver loads those before it opens its HTTP and gRPC ports.
The restarts are the supervisor's (`services.launcher.Supervisor`, ticked on a thread of its own, so that an agent's
call hanging on a wedged Triton cannot hold back the restart that ends it), with its backoff and its liveness probe:
an inference with a deadline on the built-in model when one is served, else on a deployed version that answered the
agent's check here (`ReplicaAgent.probe_target`), else Triton's live endpoint.

With AGENT_START_TRITON=false the agent syncs a Triton started by someone else (a container beside it, serving the
same repository); `serving triton-agent --prepare-only` places the live versions and exits, for an init step before
that Triton starts (`--model-control-mode=explicit --load-model=*`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time

from services.common.errors import ConfigurationError, ServingError, Unavailable
from services.common.urls import shown_url
from services.launcher import Launcher, Supervisor
from services.launcher.supervise import http_ready
from services.lifecycle.deployments import StateInvalid
from services.lifecycle.store.db import StateLost
from services.replica.agent import ReplicaAgent
from services.replica.settings import AgentSettings
from services.stacks.triton_service import STACK_TRITON_DEFAULTS
from services.triton.control_key import ensure_control_key, read_control_key
from services.triton.liveness import InferenceProbe
from services.triton.model_control import TritonModels
from services.triton.repository import RenderOptions, render
from services.triton.server import triton_process

log = logging.getLogger("triton-agent")
BUILTIN_MODELS = ["encoder"]
"""What a built-in model (AGENT_MODEL_DIR) adds to the server's start, as `serving up STACK=clearml` loads it."""


class TritonHost:
    """The agent's own tritonserver, in its run directory, started only once the agent has placed the live versions."""

    def __init__(self, settings: AgentSettings, agent: ReplicaAgent):
        self.settings, self.agent = settings, agent
        if settings.model_dir is not None:  # first: rendering replaces the whole repository
            options = RenderOptions(target="local", **STACK_TRITON_DEFAULTS["clearml"])  # as `serving up` renders it
            render(settings.model_dir, settings.repository, options)
        settings.repository.mkdir(parents=True, exist_ok=True)
        builtin = BUILTIN_MODELS if settings.model_dir is not None else []
        self.spec = triton_process(
            settings.repository,
            settings.run_dir,
            settings.ports,
            builtin,
            control_key_file=settings.triton_control_key_file,
        )
        if settings.log_json:  # Triton's own lines as JSON, as `serving up --log-json` has them
            self.spec.argv = [sys.executable, "-m", "services.triton.logpipe", "--", *self.spec.argv]
        self.spec.prepare = self.prepare
        self.spec.liveness = self.spec.liveness or self.liveness
        self.probe: InferenceProbe | None = None
        self.base_argv = list(self.spec.argv)
        self.launcher = Launcher(settings.run_dir)
        self.supervisor: Supervisor | None = None
        self.lock = threading.Lock()
        """The agent's syncs (its loop) and its `prepare` before a restart (the supervisor's thread): one at a time."""
        self.watcher: threading.Thread | None = None
        self.given_up: ConfigurationError | None = None

    def prepare(self) -> None:
        """Before each start of the server: every live version placed, and loaded at the start."""
        try:
            with self.lock:
                models = self.agent.prepare()
        except ServingError:
            raise
        except Exception as exc:  # noqa: BLE001 - the store or the registry away: the supervisor tries again later
            raise Unavailable(f"the live versions could not be placed before Triton's start: {exc}") from None
        self.spec.argv = self.base_argv + [f"--load-model={model}" for model in models]
        log.info("starting Triton with the deployed models %s", models or "none")

    def liveness(self, timeout: float) -> None:
        """One liveness probe with its deadline (run in the supervisor's thread): an inference on the version the
        agent names, or Triton's live endpoint while it names none (nothing deployed, or Triton just started)."""
        target = self.agent.probe_target
        if target is None:
            http_ready(f"{self.settings.http_url}/v2/health/live", timeout)
            return
        if self.probe is None or (self.probe.model, self.probe.version) != target:
            self.probe = InferenceProbe(self.settings.http_url, *target)
        self.probe(timeout)

    def start(self, stop: dict) -> bool:
        """Start the server and wait for it to be ready, trying again with backoff until it is or `stop` is set."""
        delay = self.settings.interval
        while not stop["now"]:
            started = time.monotonic()
            try:
                self.launcher.start_ready(self.spec, detach=True, timeout=self.settings.ready_timeout)
            except (ServingError, OSError) as exc:
                log.warning("Triton did not start: %s; trying again in %.0fs", exc, delay)
                time.sleep(delay)
                delay = min(self.settings.max_backoff, delay * 2)
                continue
            log.info("Triton ready at %s in %.1fs", self.settings.http_url, time.monotonic() - started)
            self.supervisor = Supervisor(self.launcher)
            self.watcher = threading.Thread(target=self.watch, args=(stop,), name="supervisor", daemon=True)
            self.watcher.start()
            return True
        return False

    def watch(self, stop: dict) -> None:
        """The supervisor's ticks until `stop` is set; once it gives up on Triton, `given_up` says why and `stop` is
        set, so that the agent exits too."""
        while not stop["now"]:
            try:
                self.tick()
            except ConfigurationError as exc:
                self.given_up = exc
                stop["now"] = True
            except Exception:  # noqa: BLE001 - a bug in one look must not end the supervision
                log.exception("supervising Triton failed; carrying on")
            time.sleep(self.supervisor.settings.tick if self.supervisor is not None else self.settings.interval)

    def tick(self) -> None:
        """The supervisor's look at the server; raises once it gave up on it (restarted too often), so that the
        agent exits too and whatever runs the host (Kubernetes, systemd) starts it again."""
        if self.supervisor is None:
            return
        self.supervisor.tick()
        watched = self.supervisor.watched[0]
        if watched.phase == "failed":
            raise ConfigurationError(
                f"Triton was restarted {watched.restarts.total} times and is left down ({watched.last_reason}); "
                f"its log: {self.launcher.log_path(self.spec.name)}"
            )

    def stop(self, stop: dict) -> None:
        stop["now"] = True
        if self.watcher is not None:
            self.watcher.join()
        if self.supervisor is not None:
            self.supervisor.stop()
        else:
            self.launcher.stop_all()


def build_agent(settings: AgentSettings) -> ReplicaAgent:
    """The agent over the real store, registry and Triton."""
    from services.lifecycle.store import DeploymentStore
    from services.registry.mlflow_registry import ModelRegistry
    from services.registry.settings import RegistrySettings

    options = RenderOptions(target=settings.target, gpu=settings.gpu)
    key_file = settings.triton_control_key_file  # the agent's own Triton is started with it: written when missing
    key = ensure_control_key(key_file) if settings.start_triton else read_control_key(key_file)
    return ReplicaAgent(
        DeploymentStore.open(settings.state_url),
        ModelRegistry(RegistrySettings(run_dir=settings.run_dir)),
        TritonModels(settings.repository, settings.http_url, options, control_key=key),
        replica=settings.replica_id,
        models_dir=settings.models_dir,
        max_backoff=settings.max_backoff,
    )


def run(settings: AgentSettings, *, prepare_only: bool = False) -> None:
    """Place the live versions, start Triton (unless someone else does), then sync and report until SIGTERM."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the agent retries a failed fetch itself
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a look at Triton a second is not news
    agent = build_agent(settings)
    if prepare_only:
        models = agent.prepare()
        print(" ".join(f"--load-model={model}" for model in models))
        return
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    host = TritonHost(settings, agent) if settings.start_triton else None
    if host is not None and not host.start(stop):
        return
    log.info("replica %s syncing from %s", settings.replica_id, shown_url(settings.state_url))
    last_problem = None
    lock = host.lock if host is not None else contextlib.nullcontext()
    try:
        while not stop["now"]:
            try:
                with lock:
                    agent.tick()
                last_problem = None
            except StateLost as exc:  # nothing applied from it: the replica keeps what it holds
                if str(exc) != last_problem:
                    log.error("%s; this replica keeps the versions it holds and syncs again once it is restored", exc)
                last_problem = str(exc)
            except StateInvalid as exc:  # refused whole: no file of it is touched, the replica keeps what it holds
                if str(exc) != last_problem:
                    log.error("%s; this replica keeps the versions it holds and syncs again once it is valid", exc)
                last_problem = str(exc)
            except Exception as exc:  # noqa: BLE001 - the store, the registry or Triton away: the loop lives on
                if str(exc) != last_problem:
                    log.warning("sync failed (%s); carrying on", exc)
                last_problem = str(exc)
            time.sleep(settings.interval)
        if host is not None and host.given_up is not None:
            raise host.given_up  # the agent exits with its Triton, and whatever runs the host starts both again
    finally:
        if host is not None:
            host.stop(stop)
