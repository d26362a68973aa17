"""A script for `bastion agent run`: its steps, read and checked before a session opens."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from bastion.shared.errors import BastionError

__all__ = ["ScriptError", "Step", "load_script"]


class Step(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One step of a script: a tool call, or the agent's final message."""

    tool: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    say: str | None = None


class ScriptError(BastionError):
    pass


def load_script(text: str, source: str) -> list[Step]:
    """The steps of a script, or a `ScriptError` naming the step and what is wrong with it."""
    try:
        raw = msgspec.json.decode(text)
    except msgspec.DecodeError as error:
        raise ScriptError(f"{source} is not JSON: {error}") from None
    if not isinstance(raw, list):
        raise ScriptError(f"{source} must be a JSON array of steps, not a {type(raw).__name__}")
    steps: list[Step] = []
    for number, item in enumerate(raw, start=1):
        try:
            step = msgspec.convert(item, Step)
        except msgspec.ValidationError as error:
            raise ScriptError(
                f"step {number} of {source} is not a step: {error} "
                '(a step is {"tool": NAME, "input": {...}} or {"say": TEXT})'
            ) from None
        if (step.tool is None) == (step.say is None):
            raise ScriptError(
                f'step {number} of {source} must have exactly one of "tool" and "say"'
            )
        if step.say is not None and number != len(raw):
            raise ScriptError(f'step {number} of {source}: only the last step may be a "say"')
        steps.append(step)
    if not steps:
        raise ScriptError(f"{source} has no steps")
    return steps
