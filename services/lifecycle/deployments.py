"""The deployment state as one document: each endpoint's registry versions, in which state, with which traffic policy.
Pure data (pydantic models); `services.lifecycle.state.DeploymentStore` keeps it in the shared store."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from services.common.contract import TensorSpec

VersionPhase = Literal["loading", "live", "draining", "rejected"]


class VersionState(BaseModel):
    version: str
    """The registry version; also the version directory in Triton's model repository."""
    state: VersionPhase = "loading"
    model_dir: str | None = None
    """Local copy of the version's artifacts (manifest, tokenizer, ONNX file), once fetched."""
    reason: str | None = None
    """Why it was rejected, or why a rollout rolled it back."""
    deployed_at: str | None = None
    drain_started: float | None = None
    lineage: dict = Field(default_factory=dict)
    """Registry name and version, run ids and URLs, data set, artifact hashes (see `services.registry`)."""


class RolloutPolicy(BaseModel):
    """How a rollout moves traffic and judges each step (`rollout_judge`): every threshold with its one default."""

    steps: list[int] = Field(default_factory=lambda: [10, 50, 100], min_length=1)
    """Traffic percentages for the new version, increasing, in (0, 100]; the last one should be 100."""
    dwell: float = Field(60.0, gt=0)
    """Seconds each step lasts at least before it is judged."""
    max_error_rate: float = Field(0.01, ge=0, le=1)
    """The new version's 5xx rate above which it is rolled back, when the binomial test says it is not chance."""
    max_p99_ratio: float = Field(1.5, gt=0)
    """The new version's p99 latency over the stable one's above which it is rolled back, when a Fisher exact test
    says its requests slower than this times the stable p99 outnumber the stable one's by more than chance."""
    min_requests: int = Field(200, ge=1)
    """Requests each version that gets traffic must have answered in a step before the step passes: a p99 of fewer
    is one of the slowest few requests. A significant excess of errors rolls back sooner."""
    max_wait: float = Field(600.0, ge=0)
    """Seconds a step may wait past its dwell for `min_requests`; then it is rolled back, unjudged."""
    significance: float = Field(0.05, gt=0, lt=1)
    """A breach rolls back only when its one-sided test's p-value (binomial for errors, Fisher for latency) is below
    this."""

    @field_validator("steps")
    @classmethod
    def _increasing(cls, steps: list[int]) -> list[int]:
        if any(not 0 < s <= 100 for s in steps) or steps != sorted(steps):
            raise ValueError("steps are increasing percentages in (0, 100]")
        return steps


class Rollout(RolloutPolicy):
    version: str
    stable: str
    step: int = 0
    step_started: float | None = None
    baseline: dict | None = None
    """The gateway's per-version counters when the step started (a `rollout.Snapshot`): kept here so that a
    restarted controller judges the same window."""
    status: Literal["running", "promoted", "rolled_back"] = "running"
    outcome: str | None = None
    waiting: str | None = None
    """What the step waits for past its dwell (requests on each version), while it waits."""


class EndpointState(BaseModel):
    registered_name: str | None = None
    """MLflow registered model whose new versions are deployed automatically (`serving model auto-update`)."""
    max_versions: int = Field(2, ge=1)
    """Live versions kept; older ones are drained and unloaded."""
    contract_inputs: list[TensorSpec] = Field(default_factory=list)
    contract_outputs: list[TensorSpec] = Field(default_factory=list)
    """The endpoint's tensor contract, fixed by its first version: a version that differs is rejected."""
    versions: dict[str, VersionState] = Field(default_factory=dict)
    weights: dict[str, float] = Field(default_factory=dict)
    """Canary split by version (`serving model canary --versions`); empty: the newest live version takes all."""
    newest_weights: list[float] = Field(default_factory=list)
    """Canary split over the newest live versions (`--newest N`), newest first."""
    rollout: Rollout | None = None
    rollout_policy: RolloutPolicy | None = None
    """auto-update's policy: each version that goes live newer than every version serving is rolled out under it;
    None: it takes all traffic once live (the newest live version does)."""
    removed: list[str] = Field(default_factory=list)
    """Versions taken out with `serving model remove`: auto-update never deploys them again (a newer registry version
    still comes in)."""

    def live(self) -> list[str]:
        """Live versions, newest first."""
        return sorted((v for v, s in self.versions.items() if s.state == "live"), key=int, reverse=True)


class Deployments(BaseModel):
    endpoints: dict[str, EndpointState] = Field(default_factory=dict)


def dump(state: Deployments) -> str:
    """The document as stored: compact JSON, unset fields left out."""
    return json.dumps(state.model_dump(exclude_none=True), separators=(",", ":"))
