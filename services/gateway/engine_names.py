"""The names of the gateway's engines (`services.gateway.engines` defines each one): a leaf module, so the endpoint
file's schema (`endpoints`), which checks an entry's engine, and the engines, which read entries, both import it and
every import points one way."""

from typing import Literal, get_args

EngineName = Literal["triton", "onnxruntime", "custom", "custom_async", "sklearn", "xgboost", "lightgbm"]
"""Every engine, in the order `--engine` lists them; each is the `name` of one `Engine` (the type checker holds an
engine to a name of this list)."""
NAMES: tuple[EngineName, ...] = get_args(EngineName)
SENDS_TO_TRITON: frozenset[EngineName] = frozenset({"triton"})
"""The engines whose `model` is a Triton model: named by the endpoint name rule, and checked against Triton's own
metadata by `serving endpoints add`."""
