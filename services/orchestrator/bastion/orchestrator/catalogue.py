"""A session's tools: which exist, the most a call of each can do, and the input each takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bastion.proto.policy import Effect
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.toolinput import ReadFileInput, ShellInput, WriteFileInput

__all__ = ["ToolDefinition", "catalogue_for", "definition", "find_tool"]


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    input_type: Any
    description: str


_DEFINITIONS = {
    d.name: d
    for d in (
        ToolDefinition(
            "shell",
            ShellInput,
            "Run a command with /bin/sh in the workspace, inside the sandbox.",
        ),
        ToolDefinition(
            "read_file",
            ReadFileInput,
            "Read a stretch of a workspace file, its lines numbered.",
        ),
        ToolDefinition("write_file", WriteFileInput, "Write a whole workspace file."),
    )
}


def shell_effect(network: str) -> Effect:
    """A command with the machine's network reaches outside; without one it only writes."""
    return "external" if network == "host" else "write"


def catalogue_for(*, workspace: str | None, shell: bool, network: str) -> tuple[ToolSpec, ...]:
    """The tools a session with these settings gets, and each one's effect."""
    tools: list[ToolSpec] = []
    if workspace is not None:
        tools.append(
            ToolSpec(
                name="read_file", effect="read", description=_DEFINITIONS["read_file"].description
            )
        )
        tools.append(
            ToolSpec(
                name="write_file",
                effect="write",
                description=_DEFINITIONS["write_file"].description,
            )
        )
        if shell:
            tools.append(
                ToolSpec(
                    name="shell",
                    effect=shell_effect(network),
                    description=_DEFINITIONS["shell"].description,
                )
            )
    return tuple(tools)


def definition(name: str) -> ToolDefinition:
    return _DEFINITIONS[name]


def find_tool(session: SessionInfo, name: str) -> ToolSpec | None:
    for tool in session.tools:
        if tool.name == name:
            return tool
    return None
