"""Gateway settings (env prefix `GATEWAY_`): everything the HTTP stacks share, plus the Triton connection."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.common.settings import ApiSettings


class GatewaySettings(ApiSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", env_nested_delimiter="__", extra="ignore")

    triton_grpc_url: str = "127.0.0.1:8001"
    """Triton's gRPC address."""
    triton_model: str = "encoder"
    """The Triton model the built-in endpoint sends its tensors to."""
    triton_timeout: float = Field(10.0, gt=0)
    """Deadline of every Triton call, in seconds."""
    retry_after: float = Field(1.0, gt=0)
    """Retry-After (seconds) sent with 503 when Triton is down or its queue is full."""
    buckets: list[int] = Field(default_factory=list)
    """Pad token tensors to these lengths (set when Triton batches only equal shapes); empty: pad to the longest."""
    endpoints_file: Path | None = None
    """Endpoint configuration (JSON) edited with `serving endpoints ...`; workers pick up changes without a restart."""
    endpoints_poll_interval: float = Field(1.0, gt=0)
    """How often workers check the endpoint file for changes, in seconds."""
