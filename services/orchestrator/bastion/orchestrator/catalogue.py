"""A session's tools: which of the registry's it is offered, the most a call of each can do,
and the input each takes."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from bastion.orchestrator.registry import REGISTRY, ToolDefinition
from bastion.orchestrator.upstream import UpstreamInput
from bastion.proto.policy import Effect
from bastion.proto.session import SessionInfo, ToolSpec

__all__ = [
    "catalogue_for",
    "find_tool",
    "input_schema_json",
    "input_type_of",
    "is_journaled",
    "shell_effect",
    "tool_input_of",
]


@cache
def input_schema_json(input_type: type[msgspec.Struct]) -> str:
    """The JSON Schema of a built-in tool's input as an MCP client takes it: the object
    itself (not a reference to it), without the struct's internal tag."""
    schema = msgspec.json.schema(input_type)
    definitions = schema.pop("$defs")
    name = schema["$ref"].removeprefix("#/$defs/")
    body = dict(definitions.pop(name))
    body.pop("title", None)
    body["properties"] = {k: v for k, v in body["properties"].items() if k != "kind"}
    body["required"] = [r for r in body.get("required", []) if r != "kind"]
    if definitions:
        body["$defs"] = definitions
    return msgspec.json.encode(body).decode()


def input_type_of(tool: ToolSpec) -> Any:
    """The struct a call's input is checked against before anything runs."""
    return UpstreamInput if tool.server else REGISTRY[tool.name].input_type


def tool_input_of(tool: ToolSpec, given: dict[str, Any]) -> msgspec.Struct:
    """A call's input as its tool takes it.

    Raises:
        msgspec.ValidationError: a built-in tool's input is not valid.
    """
    if tool.server:
        return UpstreamInput(arguments=given)
    converted: msgspec.Struct = msgspec.convert(given, REGISTRY[tool.name].input_type)
    return converted


def is_journaled(tool: ToolSpec) -> bool:
    """Whether the journal keeps the tool's calls (the rule is `registry.ToolDefinition`'s)."""
    return tool.journaled if tool.server else REGISTRY[tool.name].journaled


def shell_effect(network: str) -> Effect:
    """A command with the machine's network reaches outside; without one it only writes.

    `diagnostics` and `run_tests` share it: they run the project's own programs (a
    build script, a test), which can change the workspace like any command.
    """
    return "external" if network == "host" else "write"


def catalogue_for(
    *,
    workspace: str | None,
    shell: bool,
    network: str,
    skills_dir: str | None = None,
    web: bool = False,
    search: bool = False,
    sandbox: str = "bwrap",
) -> tuple[ToolSpec, ...]:
    """The tools a session with these settings gets, and each one's effect."""

    def offered(d: ToolDefinition) -> bool:
        if d.needs_web:
            return web and (search or not d.needs_search)
        return (
            workspace is not None
            and (shell or not d.needs_shell)
            and (skills_dir is not None or not d.needs_skills)
            and (sandbox == "bwrap" or not d.needs_bwrap)
        )

    return tuple(
        ToolSpec(
            name=d.name,
            effect=d.effect if d.effect is not None else shell_effect(network),
            description=d.description,
            input_schema_json=input_schema_json(d.input_type),
        )
        for d in REGISTRY.values()
        if offered(d)
    )


def find_tool(session: SessionInfo, name: str) -> ToolSpec | None:
    for tool in session.tools:
        if tool.name == name:
            return tool
    return None
