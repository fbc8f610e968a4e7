"""Options that take several values after one flag, as clearml-serving's argparse options do (`nargs='+'`):
`--weights 0.1 0.9` is read as `--weights 0.1 --weights 0.9`.

Click gives an option a fixed number of values, so the `serving` groups (`MultiValueGroup`) rewrite a command's
arguments before Click parses them: every option of the command that may be repeated (a `list[...]` option, declared
`multiple`) takes the values that follow it, up to the next option. Help still shows each option once, and the
repeated form (`--weights 0.1 --weights 0.9`) means the same. A value is anything that is not an option: `-1`,
`-0.5` and JSON such as `[-1, 384]` are values; `--name`, `-h` and `--` are not. So a positional argument cannot
follow such an option's values directly: put it first (`serving model canary ENDPOINT --weights 0.1 0.9`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from typer.core import TyperCommand, TyperGroup, TyperOption  # Typer's own classes: it vendors Click

if TYPE_CHECKING:
    from typer._click import Command, Context


def is_option(token: str) -> bool:
    """`--name`, `--name=value`, `--` or `-h`: not a value (`-1`, `-.5`, `-` and `[-1, 384]` are values)."""
    return token.startswith("--") or (len(token) > 1 and token[0] == "-" and token[1].isalpha())


def multi_value_flags(command: TyperCommand) -> set[str]:
    """The flags of the command's options that may be repeated (`--weights`, ...)."""
    return {
        flag
        for param in command.params
        if isinstance(param, TyperOption) and param.multiple and not param.is_flag
        for flag in param.opts
    }


def expand(command: TyperCommand, args: list[str]) -> list[str]:
    """`args` with each `--flag v1 v2 ...` of a multi-value option written as `--flag v1 --flag v2 ...`. The first
    value after the flag is taken as Click takes it (whatever it looks like); `--flag=v` takes only `v`; the
    arguments after `--` are left as they are."""
    flags = multi_value_flags(command)
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        out.append(token)
        i += 1
        if token == "--":
            return out + args[i:]
        if token not in flags or i >= len(args):
            continue
        out.append(args[i])  # the option's first value
        i += 1
        while i < len(args) and not is_option(args[i]):
            out += [token, args[i]]
            i += 1
    return out


class MultiValueGroup(TyperGroup):
    """A `serving` command group whose commands' repeatable options also take several values after one flag."""

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, TyperCommand):
            rest = expand(command, rest)
        return name, command, rest
