"""The admin API the `serving model ...` commands talk to, mounted in the gateway: change an endpoint's deployment
(auto-update, canary, rollout, removal) and read it back. Every route needs `Authorization: Bearer <admin token>`,
checked before the body is read, and takes a body of at most `GATEWAY_ADMIN_MAX_BODY_BYTES` (`admin_guard`).
Also `GET /models/{endpoint}`: the lineage of what each live version is, open like the health routes.

The routes only change the shared deployment state (`services.lifecycle.store`); the lifecycle controller carries the
changes out (fetch, load into Triton, warm up, drain) and every gateway's workers pick the new traffic policy up from
the same store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParameter
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from observability.metrics import endpoint_request_counts
from services.api.openapi import OK, errors
from services.common.errors import ConfigurationError, NotFound, Unavailable
from services.common.names import (
    NAME_MAX_LENGTH,
    NAME_PATTERN,
    REGISTERED_NAME_MAX_LENGTH,
    REGISTERED_RULE,
    VERSION_PATTERN,
    validated_name,
    validated_registered_name,
)
from services.gateway.admin_guard import NO_STATE, admin_token, guarded_route
from services.gateway.settings import GatewaySettings
from services.lifecycle import transitions
from services.lifecycle.deployments import MOST_VERSIONS, EndpointState, RolloutPolicy
from services.lifecycle.routing import effective_weights
from services.lifecycle.shares import arrivals, hand_back, share_reasons
from services.lifecycle.store import DeploymentStore, StateLost, StateStoreUnavailable
from services.lifecycle.store.db import StateReadOnly

log = logging.getLogger(__name__)
Endpoint = Annotated[
    str,
    PathParameter(
        pattern=NAME_PATTERN,
        description=f"The endpoint's name, at most {NAME_MAX_LENGTH} characters: it becomes a Triton model directory.",
    ),
    AfterValidator(validated_name),
]
"""Every route's `{endpoint}`: a name that breaks the rule is a 422 naming the pattern before anything runs."""
Version = Annotated[str, PathParameter(pattern=r"^[0-9]{1,18}$", description="A registry version number.")]
RegisteredName = Annotated[
    str,
    Field(
        description=f"An MLflow registered model name: {REGISTERED_RULE}.",
        json_schema_extra={"minLength": 1, "maxLength": REGISTERED_NAME_MAX_LENGTH},
    ),
    AfterValidator(validated_registered_name),
]
"""A registered model name from a body: one that breaks MLflow's rule is a 422 naming the rule (the length is checked
by the rule too, so a long name gets the same sentence, cut to a printable form)."""
RegistryVersion = Annotated[str, Field(pattern=VERSION_PATTERN, description="A registry version number.")]


class AdminBody(BaseModel):
    """Every admin body: numbers finite (JSON's `NaN` and `Infinity`, which Python's parser takes, refused)."""

    model_config = ConfigDict(allow_inf_nan=False)


class AutoUpdate(AdminBody):
    name: RegisteredName
    max_versions: int = Field(2, ge=1, le=MOST_VERSIONS)
    rollout: RolloutPolicy | None = None
    """Roll each new version out under this policy while another serves; none: it takes all traffic once live."""


class Canary(AdminBody):
    weights: list[float] = Field(min_length=1, max_length=MOST_VERSIONS)
    versions: list[RegistryVersion] | None = Field(None, max_length=MOST_VERSIONS)
    newest: int | None = Field(None, ge=1, le=MOST_VERSIONS)

    @model_validator(mode="after")
    def _one_of(self) -> Canary:
        if (self.versions is None) == (self.newest is None):
            raise ValueError("give either versions or newest")
        count = len(self.versions) if self.versions is not None else self.newest
        if count != len(self.weights):
            raise ValueError(f"{len(self.weights)} weights for {count} versions")
        if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError("weights must be non-negative and not all zero")
        return self


class RolloutRequest(RolloutPolicy):
    model_config = ConfigDict(allow_inf_nan=False)

    version: RegistryVersion
    dry_run: bool = False
    """Check the request and answer the rollout it would start, changing nothing."""


def describe(name: str, endpoint: EndpointState, counts: dict[tuple[str, str], float]) -> dict:
    shares, reasons = effective_weights(endpoint), share_reasons(name, endpoint)
    versions = []
    for version, item in sorted(endpoint.versions.items(), key=lambda kv: -int(kv[0])):
        versions.append(
            {
                "version": version,
                "state": item.state,
                "traffic_share": round(shares.get(version, 0.0), 4),
                "share_reason": reasons[version],
                "requests_total": counts.get((name, version), 0.0),
                "deployed_at": item.deployed_at,
                "reason": item.reason,
                **item.lineage,
            }
        )
    rollout = endpoint.rollout.model_dump() if endpoint.rollout else None
    return {
        "endpoint": name,
        "registered_name": endpoint.registered_name,
        "max_versions": endpoint.max_versions,
        "versions": versions,
        "rollout": rollout,
        "hand_back": hand_back(name, endpoint),
        "rollout_policy": endpoint.rollout_policy.model_dump() if endpoint.rollout_policy else None,
        "new_versions": (
            arrivals(endpoint.rollout_policy, pinned=bool(endpoint.weights)) if endpoint.registered_name else None
        ),
    }


READ_ONLY = (
    "this gateway may only read the deployment state (its SERVING_STATE_URL role is read-only, as a fleet's serving "
    "gateways' is): send admin requests to the admin API that holds the writer role (docs: Deployment, Least "
    "privilege)"
)


UNREACHABLE = (
    "the deployment state store cannot be reached now, so nothing was changed (a change is one transaction: all of it "
    "or none); the gateways keep serving the last state they read: send the same request again after Retry-After "
    "seconds; the server log has why, under this request id (`serving logs --request-id`)"
)
STORE_RETRY_AFTER = 5.0
"""Seconds a caller waits before sending a request refused because the store cannot be reached: about what a
PostgreSQL restart takes."""


class GuardedStore:
    """The deployment state as the routes use it: a state that cannot be read (invalid, hand-edited, lost) is a 503
    with a generic message and the request id; a store that cannot be reached (down, restarting, cut off) a 503 that
    says nothing was changed and to send the request again after `STORE_RETRY_AFTER` seconds. The store's address and
    the parser's or driver's text go to the log only, never to a caller (`GET /models/{endpoint}` is open). A change
    refused because this gateway's database role may only read is a 503 that says so (only a caller with the token
    gets there)."""

    def __init__(self, store: DeploymentStore):
        self.store = store

    @contextmanager
    def _unreadable_is_unavailable(self) -> Iterator[None]:
        try:
            yield
        except StateReadOnly as exc:
            log.error("the admin API cannot change the deployment state in %s: %s", self.store.url, exc.message)
            raise Unavailable(READ_ONLY) from None
        except (ConfigurationError, StateLost) as exc:  # before StateLost's base: the store answers
            log.error("the admin API cannot use the deployment state in %s: %s", self.store.url, exc.message)
            raise Unavailable(
                "the deployment state cannot be read now; the server log has why, under this request id "
                "(`serving logs --request-id`)",
                retry_after=1.0,
            ) from None
        except StateStoreUnavailable as exc:
            log.error("the admin API cannot reach the deployment state in %s: %s", self.store.url, exc.message)
            raise Unavailable(UNREACHABLE, retry_after=STORE_RETRY_AFTER) from None

    def read(self):
        with self._unreadable_is_unavailable():
            return self.store.read()

    def update(self, change):
        with self._unreadable_is_unavailable():
            return self.store.update(change)


def admin_router(settings: GatewaySettings, store: DeploymentStore | None) -> APIRouter:
    """`/admin/...` behind the admin token, and the open `GET /models/{endpoint}`, over `store` (None: no deployment
    state configured). The token is read now: a blank one or an unreadable file raises ConfigurationError. The routes
    are plain functions: FastAPI runs them in its thread pool, so the store's queries never block the worker's event
    loop."""
    guarded = GuardedStore(store) if store is not None else None
    route = guarded_route(admin_token(settings), guarded is not None, settings.admin_max_body_bytes)
    router = APIRouter()
    router.include_router(_admin_routes(guarded, route))
    router.include_router(_lineage_routes(guarded))
    return router


def _admin_routes(guarded: GuardedStore | None, route: type[APIRoute]) -> APIRouter:
    """Each route runs only once its `route` class let the request in, which refuses it when `guarded` is None."""

    def store() -> GuardedStore:
        if guarded is None:  # refused by the route class already
            raise Unavailable(NO_STATE)
        return guarded

    admin = APIRouter(
        prefix="/admin",
        route_class=route,
        tags=["admin"],
        responses=OK | errors(400, 401, 404, 409, 413, 422, 503),
    )

    @admin.get("/endpoints", summary="Every deployed endpoint: versions, state, traffic share, requests so far")
    def list_endpoints() -> dict:
        counts = endpoint_request_counts()
        return {"endpoints": [describe(n, e, counts) for n, e in sorted(store().read().endpoints.items())]}

    @admin.put("/endpoints/{endpoint}/auto-update", summary="Deploy every new version of a registered model")
    def auto_update(endpoint: Endpoint, body: AutoUpdate) -> dict:
        store().update(lambda s: transitions.set_auto_update(s, endpoint, body.name, body.max_versions, body.rollout))
        return {"endpoint": endpoint, "registered_name": body.name, "max_versions": body.max_versions} | {
            "rollout": body.rollout.model_dump() if body.rollout else None,
            "new_versions": arrivals(body.rollout),
        }

    @admin.put("/endpoints/{endpoint}/canary", summary="Split traffic by weight over versions")
    def canary(endpoint: Endpoint, body: Canary) -> dict:
        traffic = store().update(lambda s: transitions.canary(s, endpoint, body.weights, body.versions))
        return {"endpoint": endpoint, "traffic": traffic}

    @admin.post("/endpoints/{endpoint}/rollout", summary="Move traffic to a version step by step, with rollback")
    def rollout(endpoint: Endpoint, body: RolloutRequest) -> dict:
        policy = body.model_dump(exclude={"version", "dry_run"})
        if body.dry_run:
            planned = transitions.start_rollout(store().read(), endpoint, body.version, **policy)
            return {"endpoint": endpoint, "rollout": planned.model_dump(), "dry_run": True}
        started = store().update(lambda s: transitions.start_rollout(s, endpoint, body.version, **policy))
        return {"endpoint": endpoint, "rollout": started.model_dump()}

    @admin.post(
        "/endpoints/{endpoint}/versions/{version}/redeploy", summary="Deploy a rejected or removed version again"
    )
    def redeploy(endpoint: Endpoint, version: Version) -> dict:
        store().update(lambda s: transitions.redeploy(s, endpoint, version))
        return {"endpoint": endpoint, "version": version, "state": "loading"}

    @admin.delete("/endpoints/{endpoint}/versions/{version}", summary="Drain and unload a version")
    def remove(endpoint: Endpoint, version: Version) -> dict:
        now = time.time()
        store().update(lambda s: transitions.remove(s, endpoint, version, now))
        return {"endpoint": endpoint, "version": version, "state": "draining"}

    return admin


def _lineage_routes(store: GuardedStore | None) -> APIRouter:
    lineage = APIRouter(tags=["lifecycle"], responses=OK | errors(404, 422, 503))

    @lineage.get("/models/{endpoint}", summary="What each version of an endpoint is and where it came from")
    def models(endpoint: Endpoint) -> dict:
        if store is None:
            raise NotFound("no deployment state is configured on this server")
        return describe(endpoint, transitions.endpoint(store.read(), endpoint), endpoint_request_counts())

    return lineage
