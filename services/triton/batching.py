"""Pure functions behind the Python-backend models: merge the requests of a dynamic batch into one padded tensor
batch and split the result back, one slice per request. Tested without a server."""

from __future__ import annotations

import numpy as np


def merge_padded(
    requests: list[dict[str, np.ndarray]], pad_values: dict[str, int] | None = None
) -> tuple[dict[str, np.ndarray], list[int]]:
    """Stack requests whose tensors are [rows_i, length_i] into [sum(rows), max(length)], padding on the right.

    Requests of different lengths can then run as one model call (ragged batching). Returns the merged tensors and
    the row count of each request, for `split_rows`.
    """
    pad_values = pad_values or {}
    rows = [next(iter(r.values())).shape[0] for r in requests]
    width = max(t.shape[1] for r in requests for t in r.values())
    merged = {}
    for name in requests[0]:
        first = requests[0][name]
        out = np.full((sum(rows), width), pad_values.get(name, 0), dtype=first.dtype)
        start = 0
        for request, count in zip(requests, rows, strict=True):
            tensor = request[name]
            out[start : start + count, : tensor.shape[1]] = tensor
            start += count
        merged[name] = out
    return merged, rows


def split_rows(output: np.ndarray, rows: list[int]) -> list[np.ndarray]:
    """Undo `merge_padded` on a model output: one [rows_i, ...] slice per request."""
    bounds = np.cumsum([0] + rows)
    return [output[bounds[i] : bounds[i + 1]] for i in range(len(rows))]


def decode_texts(raw: np.ndarray) -> list[str]:
    """A BYTES tensor ([rows, 1] or [rows]) to Python strings; raises UnicodeDecodeError for bad UTF-8."""
    return [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in raw.reshape(-1)]
