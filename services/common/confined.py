"""Paths built from names that came from outside (the deployment state, the registry, a caller) kept inside the
directory they belong to: every filesystem operation that joins such names into a path goes through `within`."""

from __future__ import annotations

from pathlib import Path

from services.common.errors import ConfigurationError


class OutsideBase(ConfigurationError):
    """A path built from untrusted names would leave its base directory: nothing is done with it."""


def within(base: Path | str, *parts: str) -> Path:
    """`base / parts...`, resolved (links followed), if it lies inside `base` resolved and is not `base` itself;
    else `OutsideBase`. Each part is one path segment: no separator, not empty, not '.' or '..'."""
    root = Path(base).resolve()
    for part in parts:
        if not isinstance(part, str) or part in ("", ".", "..") or "/" in part or "\\" in part or "\x00" in part:
            raise OutsideBase(f"{part!r:.80} is not one path segment under {root}")
    target = root.joinpath(*parts).resolve()
    if target == root or not target.is_relative_to(root):
        raise OutsideBase(f"{target} is outside {root}")
    return target
