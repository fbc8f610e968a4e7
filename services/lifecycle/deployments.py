"""The deployment state as one document: each endpoint's registry versions, in which state, with which traffic policy.
Pure data (pydantic models); `services.lifecycle.store.DeploymentStore` keeps it in the shared store.

The document is input like any request: whoever can write the store, or hand an operator a backup, writes it. So
every reader validates it whole by the rules of every other door (`services.common.names`): endpoint names, registered
model names, version keys (each `VersionState.version` equal to its key), numbers within the bounds below, no NaN or
infinity. A state that breaks one is refused whole (`StateInvalid`). Paths are never taken from it: a version's
files are at `<models directory>/<endpoint>/<version>`, joined by `services.common.confined.within`."""

from __future__ import annotations

import json
import time
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from services.common.contract import TensorSpec
from services.common.errors import ConfigurationError
from services.common.names import (
    REGISTERED_RULE,
    RULE,
    VERSION_PATTERN,
    is_valid_name,
    is_valid_registered_name,
    is_valid_version,
    printable,
    shown,
)


class Phase(StrEnum):
    """Where a version stands. A version is added `loading`, goes `live` once every check passed (then it may get
    traffic), `draining` when taken out of traffic (unloaded and forgotten once drained), `rejected` when a check or a
    rollout failed it (it never gets traffic again unless redeployed). Two more stages are read from the fields
    beside the phase: `VersionState.verified` and `VersionState.draining_out`."""

    LOADING = "loading"
    LIVE = "live"
    DRAINING = "draining"
    REJECTED = "rejected"


class RolloutStatus(StrEnum):
    """Where a rollout stands: `running` moves traffic step by step; `promoted` and `rolled_back` are its ends."""

    RUNNING = "running"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"


MOST_VERSIONS = 64
"""The most live versions an endpoint keeps (`max_versions`), and the most versions a canary splits over: each live
version is a model instance in every Triton replica."""
LONGEST_WAIT = 7 * 24 * 3600.0
"""Seconds (a week): the longest a rollout step may dwell, or wait past its dwell for its requests."""
MOST_REQUESTS = 10_000_000
"""The most requests a rollout step may ask of each version before it is judged."""
LARGEST_P99_RATIO = 1000.0
"""The largest latency ratio a rollout may tolerate (a thousand times the stable version's p99)."""
LARGEST_WEIGHT = 1e6
"""The largest canary weight (weights are relative: 90 and 10, or 0.9 and 0.1)."""
LONGEST_TEXT = 10_000
"""Characters of a reason, an outcome or a recorded path at most."""
LARGEST_DOCUMENT = 8 << 20
"""Bytes of a whole state document at most: every process parses it again each time it moves, and gateways show
parts of it on open routes."""
LATEST_TIME = 2.0**32
"""The latest time a state may record (seconds since the epoch: February 2106). A time further ahead of the clock of
the process reading it than `transitions.CLOCK_SKEW` is not waited for (`transitions.due_for_unload`, the
controller's rollouts)."""
EPOCH_AHEAD_MS = 24 * 3600 * 1000
"""How far ahead of a host's clock a restore epoch may be (a day: hosts' clocks differ by far less)."""
RESTORE_ABOVE_MS = EPOCH_AHEAD_MS + 5 * 60 * 1000
"""How far ahead of its clock an epoch may be for a restore to go above it: what readers take, and five minutes of
clock skew more, so that a host whose clock is behind another's still passes what that one took (its own readers
then take the restored epoch once their clock has caught up, within those minutes)."""
LARGEST_COUNT = 2**53
"""The largest restore epoch or revision: a count JSON, Python and both databases hold exactly, with room to grow
(an epoch is a time in milliseconds, ~1.8e12 today)."""


def _endpoint_name(name: str) -> str:
    if not is_valid_name(name):
        raise ValueError(f"endpoint name {shown(name)} is not valid: use {RULE}")
    return name


def _escaped(limit: int) -> AfterValidator:
    """A validator: a text with its control characters escaped (a newline as `\\n`) and cut to `limit`, so that a
    reason or an outcome reaches an operator's terminal as text, never as escape sequences, and stays valid when the
    state is read again."""

    def escape(text: str) -> str:
        return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")[:limit]

    return AfterValidator(escape)


def _version(version: str) -> str:
    if not is_valid_version(version):
        raise ValueError(f"version {shown(version)} is not a registry version number ({VERSION_PATTERN})")
    return version


def _registered_name(name: str) -> str:
    if not is_valid_registered_name(name):
        raise ValueError(f"registered model name {shown(name)} is not valid: use {REGISTERED_RULE}")
    return name


EndpointName = Annotated[str, AfterValidator(_endpoint_name)]
"""An endpoint's name (`services.common.names.RULE`): a directory of Triton's repository and of every models
directory."""
VersionKey = Annotated[str, AfterValidator(_version)]
"""A registry version number: a directory under its endpoint's."""
RegisteredName = Annotated[str, AfterValidator(_registered_name)]
"""An MLflow registered model name (MLflow's rule)."""
Text = Annotated[str, Field(max_length=LONGEST_TEXT), _escaped(LONGEST_TEXT)]


class StateModel(BaseModel):
    """Every part of the state: numbers finite (JSON's `NaN` and `Infinity` refused)."""

    model_config = ConfigDict(allow_inf_nan=False)


class VersionState(StateModel):
    version: VersionKey
    """The registry version; also the version directory in Triton's model repository. Equal to its key in
    `EndpointState.versions`."""
    state: Phase = Phase.LOADING
    model_dir: Annotated[str, Field(max_length=LONGEST_TEXT)] | None = None
    """Where the controller fetched the version's artifacts (manifest, tokenizer, ONNX file), as a record: every
    process finds a version's files under its own models directory (`<models_dir>/<endpoint>/<version>/model`), never
    at a path the state names."""
    reason: Text | None = None
    """Why it was rejected, or why a rollout rolled it back."""
    deployed_at: Annotated[str, Field(max_length=64), _escaped(64)] | None = None
    drain_started: float | None = Field(None, ge=0, le=LATEST_TIME)
    lineage: dict = Field(default_factory=dict)
    """Registry name and version, run ids and URLs, data set, artifact hashes (see `services.registry`)."""

    @field_validator("model_dir")
    @classmethod
    def _printable(cls, model_dir: str | None) -> str | None:
        if model_dir is not None and not model_dir.isprintable():
            raise ValueError(f"model_dir {shown(model_dir)} holds control characters")
        return model_dir

    @field_validator("lineage")
    @classmethod
    def _lineage(cls, lineage: dict) -> dict:
        """What is read from the lineage is held to its rules: the registered model a version is fetched from, its
        version, and the artifact hashes the controller checked."""
        registry = lineage.get("registry", {})
        if not isinstance(registry, dict):
            raise ValueError("lineage.registry is an object (name, version, url)")
        if registry.get("name") is not None:
            _registered_name(registry["name"])
        if registry.get("version") is not None:
            _version(registry["version"])
        artifacts = lineage.get("artifacts", {})
        if not isinstance(artifacts, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in artifacts.items()
        ):
            raise ValueError("lineage.artifacts maps file names to their sha256")
        return lineage

    def verified(self) -> bool:
        """`loading`, and checked by the controller (it carries its lineage from then on): with
        CONTROLLER_PLACEMENT=agents, the replicas may load it."""
        return self.state == Phase.LOADING and bool(self.lineage)

    def draining_out(self) -> bool:
        """Out of traffic and still held by Triton until it has drained: `draining`, or `rejected` by a rollout that
        had given it traffic (its drain start set; one rejected at deployment never had any)."""
        return self.state == Phase.DRAINING or (self.state == Phase.REJECTED and self.drain_started is not None)


class RolloutPolicy(StateModel):
    """How a rollout moves traffic and judges each step (`rollouts.judge`): every threshold with its one default and
    its bounds (the admin API takes a policy by this model)."""

    steps: list[int] = Field(default_factory=lambda: [10, 50, 100], min_length=1, max_length=100)
    """Traffic percentages for the new version, increasing, in (0, 100]; the last one should be 100."""
    dwell: float = Field(60.0, gt=0, le=LONGEST_WAIT)
    """Seconds each step lasts at least before it is judged."""
    max_error_rate: float = Field(0.01, ge=0, le=1)
    """The new version's 5xx rate above which it is rolled back, when the binomial test says it is not chance."""
    max_p99_ratio: float = Field(1.5, gt=0, le=LARGEST_P99_RATIO)
    """The new version's p99 latency over the stable one's above which it is rolled back, when a Fisher exact test
    says its requests slower than this times the stable p99 outnumber the stable one's by more than chance."""
    min_requests: int = Field(200, ge=1, le=MOST_REQUESTS)
    """Requests each version that gets traffic must have answered in a step before the step passes: a p99 of fewer
    is one of the slowest few requests. A significant excess of errors rolls back sooner."""
    max_wait: float = Field(600.0, ge=0, le=LONGEST_WAIT)
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
    version: VersionKey
    stable: VersionKey
    step: int = Field(0, ge=0)
    """The step under way: an index into `steps`."""
    step_started: float | None = Field(None, ge=0, le=LATEST_TIME)
    baseline: dict | None = None
    """The gateway's per-version counters when the step started (a `rollouts.windows.Snapshot`): kept here so that a
    restarted controller judges the same window."""
    status: RolloutStatus = RolloutStatus.RUNNING
    outcome: Text | None = None
    waiting: Text | None = None
    """What the step waits for past its dwell (requests on each version), while it waits."""

    @model_validator(mode="after")
    def _step_in_steps(self) -> Rollout:
        if self.step >= len(self.steps):
            raise ValueError(f"step {self.step} is not one of the {len(self.steps)} steps (counted from 0)")
        return self

    def running(self) -> bool:
        return self.status == RolloutStatus.RUNNING

    def share(self) -> int:
        """The new version's percentage of traffic at the step under way."""
        return self.steps[min(self.step, len(self.steps) - 1)]


Weight = Annotated[float, Field(ge=0, le=LARGEST_WEIGHT)]


class EndpointState(StateModel):
    registered_name: RegisteredName | None = None
    """MLflow registered model whose new versions are deployed automatically (`serving model auto-update`)."""
    max_versions: int = Field(2, ge=1, le=MOST_VERSIONS)
    """Live versions kept; older ones are drained and unloaded."""
    contract_inputs: list[TensorSpec] = Field(default_factory=list, max_length=64)
    contract_outputs: list[TensorSpec] = Field(default_factory=list, max_length=64)
    """The endpoint's tensor contract, fixed by its first version: a version that differs is rejected."""
    versions: dict[VersionKey, VersionState] = Field(default_factory=dict)
    weights: dict[VersionKey, Weight] = Field(default_factory=dict, max_length=MOST_VERSIONS)
    """Canary split by version (`serving model canary --versions`); empty: the newest live version takes all."""
    newest_weights: list[Weight] = Field(default_factory=list, max_length=MOST_VERSIONS)
    """Canary split over the newest live versions (`--newest N`), newest first."""
    rollout: Rollout | None = None
    rollout_policy: RolloutPolicy | None = None
    """auto-update's policy: each version that goes live newer than every version serving is rolled out under it;
    None: it takes all traffic once live (the newest live version does)."""
    removed: list[VersionKey] = Field(default_factory=list)
    """Versions taken out with `serving model remove`: auto-update never deploys them again (a newer registry version
    still comes in)."""

    @model_validator(mode="after")
    def _versions_under_their_keys(self) -> EndpointState:
        for key, item in self.versions.items():
            if item.version != key:
                raise ValueError(f"versions.{key} holds version {shown(item.version)}: a version is kept under its own")
        return self

    def live(self) -> list[str]:
        """Live versions, newest first."""
        return sorted((v for v, s in self.versions.items() if s.state == Phase.LIVE), key=int, reverse=True)

    def running_rollout(self) -> Rollout | None:
        """The rollout, while it runs."""
        return self.rollout if self.rollout is not None and self.rollout.running() else None


class Deployments(StateModel):
    endpoints: dict[EndpointName, EndpointState] = Field(default_factory=dict)


def dump(state: Deployments) -> str:
    """The document as stored: compact JSON, unset fields left out."""
    return json.dumps(state.model_dump(exclude_none=True), separators=(",", ":"))


class StateInvalid(ConfigurationError):
    """A deployment state that breaks a rule: refused whole, nothing applied from it, and the fields that break
    their rules said (`problems`)."""

    def __init__(self, lead: str, problems: str):
        super().__init__(f"{lead}: {problems}")
        self.problems = problems


def parse(document: str | bytes, lead: str = "the deployment state is invalid") -> Deployments:
    """`document` as a state, validated whole; else `StateInvalid`, its message `lead` and the fields that break a
    rule."""
    if not isinstance(document, str | bytes):
        raise StateInvalid(lead, f"the document is {type(document).__name__}, not JSON text")
    if len(document) > LARGEST_DOCUMENT:
        raise StateInvalid(lead, f"the document is {len(document):,} characters, over {LARGEST_DOCUMENT:,}")
    try:
        return Deployments.model_validate_json(document)
    except ValidationError as error:
        raise StateInvalid(lead, problems(error)) from None


def problems(error: ValidationError, most: int = 3) -> str:
    """Which fields of a document break which rule, as a message or a log line may carry them: each field's path
    (names cut to a printable form), then the rule; the first `most` of them."""
    said = []
    for found in error.errors(include_url=False, include_input=False)[:most]:
        where = ".".join(printable(part) for part in found["loc"])
        rule = found["msg"].removeprefix("Value error, ")
        said.append(f"{where}: {rule}" if where else rule)
    more = error.error_count() - most
    return "; ".join(said) + (f" (and {more} more)" if more > 0 else "")


def checked_counts(
    epoch: object,
    revision: object,
    lead: str = "the deployment state's stamp is invalid",
    ahead_ms: int = EPOCH_AHEAD_MS,
) -> tuple[int, int]:
    """A stored restore epoch and revision, each a count in [0, `LARGEST_COUNT`], the epoch (a time in milliseconds)
    not more than `ahead_ms` ahead of this host's clock (`epoch_ahead`); else `StateInvalid`."""
    for name, value in (("epoch", epoch), ("revision", revision)):
        if type(value) is not int or not 0 <= value <= LARGEST_COUNT:
            raise StateInvalid(lead, f"{name} {printable(repr(value))} is not a count in [0, {LARGEST_COUNT}]")
    if epoch_ahead(epoch, ahead_ms):  # type: ignore[arg-type]
        hours = f"{ahead_ms / 3_600_000:g} h"
        raise StateInvalid(lead, f"epoch {epoch} (a time in ms) is more than {hours} ahead of this host's clock")
    return epoch, revision  # type: ignore[return-value]


def epoch_ahead(epoch: int, allowance_ms: int = EPOCH_AHEAD_MS) -> bool:
    """Whether a restore epoch lies more than `allowance_ms` ahead of this host's clock: no restore made one (an
    epoch is the time of the restore, or one above the last), so it was written by hand or by a clock far off, and
    taking it would leave every later restore's epoch behind it. Readers refuse one a day ahead; a restore goes
    above any up to `RESTORE_ABOVE_MS` ahead, so that it passes every epoch a host with a later clock took."""
    return epoch > time.time() * 1000 + allowance_ms
