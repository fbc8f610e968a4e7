"""Deployment states the lifecycle's unit tests start from."""

from __future__ import annotations

from services.lifecycle.deployments import Deployments, EndpointState, Rollout, VersionState

POLICY = {"steps": [10, 50, 100], "dwell": 60.0, "max_error_rate": 0.01, "max_p99_ratio": 1.5, "min_requests": 20}


def deployments(*versions: tuple[str, str], **fields) -> Deployments:
    """Endpoint `emb` with the given (version, state) pairs."""
    endpoint = EndpointState(versions={v: VersionState(version=v, state=s) for v, s in versions}, **fields)
    return Deployments(endpoints={"emb": endpoint})


def rolling(step: int = 0, **fields) -> Deployments:
    """Versions 1 and 2 live, a running rollout of 2 against 1 at `step`."""
    state = deployments(("1", "live"), ("2", "live"), **fields)
    state.endpoints["emb"].rollout = Rollout(version="2", stable="1", step=step, baseline={"versions": {}}, **POLICY)
    return state
