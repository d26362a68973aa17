"""A session's tools: which exist, the most a call of each can do, and the input each takes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import msgspec

from bastion.proto.mcp import OfferedTool
from bastion.proto.policy import Effect
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.toolinput import (
    ApplyPatchInput,
    DiagnosticsInput,
    EditFileInput,
    FetchUrlInput,
    FindFilesInput,
    ListFilesInput,
    ReadFileInput,
    RunTestsInput,
    SearchFilesInput,
    ShellInput,
    SkillReadInput,
    SkillRunInput,
    SkillWriteInput,
    WebSearchInput,
    WriteFileInput,
)

__all__ = [
    "FETCH_URL",
    "SKILL_READ",
    "SKILL_RUN",
    "SKILL_WRITE",
    "WEB_SEARCH",
    "ToolDefinition",
    "UpstreamInput",
    "catalogue_for",
    "definition",
    "find_tool",
    "input_type_of",
    "is_journaled",
    "tool_input_of",
    "upstream_tool",
]

SKILL_READ = "skill_read"
SKILL_RUN = "skill_run"
SKILL_WRITE = "skill_write"
FETCH_URL = "fetch_url"
WEB_SEARCH = "web_search"


@dataclass(frozen=True)
class ToolDefinition:
    """A built-in tool; `effect` None means it runs programs (see `shell_effect`).

    `journaled`: a call that is neither read-only nor idempotent goes in the journal, so
    an identical call (same session, tool and input) is answered from it rather than
    made again, and one that got no answer is never repeated. The rule: every tool whose
    effect is not `read` — except `shell`, since a command given twice should run twice
    (a test suite after a fix), and the checks `diagnostics` and `run_tests`, which are
    asked again precisely to see what changed. A tool that declares itself idempotent
    (an upstream MCP tool's `idempotentHint`, as reviewed) is not journaled either.
    """

    name: str
    input_type: Any
    description: str
    effect: Effect | None
    needs_shell: bool = False
    journaled: bool = False
    needs_skills: bool = False
    needs_web: bool = False
    """Offered only to a session opened with `web` (fetch_url), workspace or not."""
    needs_search: bool = False
    """Offered only when a search provider is configured (`BASTION_SEARCH`)."""


_DEFINITIONS = {
    d.name: d
    for d in (
        ToolDefinition(
            "read_file",
            ReadFileInput,
            "Read a stretch of a workspace file, its lines numbered.",
            "read",
        ),
        ToolDefinition(
            "write_file", WriteFileInput, "Write a whole workspace file.", "write", journaled=True
        ),
        ToolDefinition(
            "edit_file",
            EditFileInput,
            "Replace old_string with new_string in a workspace file: it must be there once, "
            "or every time with replace_all.",
            "write",
            journaled=True,
        ),
        ToolDefinition(
            "apply_patch",
            ApplyPatchInput,
            "Apply a unified diff or a *** Begin Patch patch to workspace files: all of it, "
            "or nothing if any hunk does not fit.",
            "write",
            journaled=True,
        ),
        ToolDefinition(
            "list_files",
            ListFilesInput,
            "List a workspace directory; directories end with /.",
            "read",
        ),
        ToolDefinition(
            "find_files",
            FindFilesInput,
            "Find workspace files by a glob (src/**/*.rs, *.{ts,tsx}; no / = any depth).",
            "read",
        ),
        ToolDefinition(
            "search_files",
            SearchFilesInput,
            "Search workspace files by a regular expression, with lines around each match.",
            "read",
        ),
        ToolDefinition(
            "shell",
            ShellInput,
            "Run a command with /bin/sh in the workspace, inside the sandbox.",
            None,
            needs_shell=True,
        ),
        ToolDefinition(
            "diagnostics",
            DiagnosticsInput,
            "Run the project's checker (ruff or compileall, cargo check, tsc, go vet) in the "
            "sandbox; its problems by file and line.",
            None,
            needs_shell=True,
        ),
        ToolDefinition(
            "run_tests",
            RunTestsInput,
            "Run the project's tests (make test, cargo test, go test, npm test, pytest) in "
            "the sandbox; counts, failures by name and the end of the output.",
            None,
            needs_shell=True,
        ),
        ToolDefinition(
            FETCH_URL,
            FetchUrlInput,
            "Fetch a public web page (http or https) as markdown, text or html; private and "
            "internal addresses are refused.",
            "external",
            needs_web=True,
        ),
        ToolDefinition(
            WEB_SEARCH,
            WebSearchInput,
            "Search the web: up to count results (5 unless asked, at most 10), each a title, "
            "an address and a snippet; freshness day, week, month or year keeps recent ones.",
            "external",
            needs_web=True,
            needs_search=True,
        ),
        ToolDefinition(
            SKILL_READ,
            SkillReadInput,
            "Read a skill's SKILL.md by its name; once read, the calls its allowed-tools "
            "names may run without asking.",
            "read",
            needs_skills=True,
        ),
        ToolDefinition(
            SKILL_RUN,
            SkillRunInput,
            "Run one of a skill's scripts in the sandbox, with arguments: the skill's files "
            "read-only at /skill, the workspace at /workspace where it starts.",
            "write",
            needs_shell=True,
            needs_skills=True,
        ),
        ToolDefinition(
            SKILL_WRITE,
            SkillWriteInput,
            "Write a skill's SKILL.md from a name, a description and instructions (nothing "
            "else: no scripts, no permissions).",
            "write",
            journaled=True,
            needs_skills=True,
        ),
    )
}


class UpstreamInput(msgspec.Struct, frozen=True, kw_only=True):
    """The input of an upstream MCP tool: its arguments as given, checked by its server.

    Bounded by `ToolCall.input` (64 keys, the bus message's size); the arguments go to the
    server as they are, so the journal keys a call on exactly them.
    """

    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


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


def upstream_tool(offered: OfferedTool) -> ToolSpec:
    """A session's tool for an upstream MCP tool the mcp service offered."""
    return ToolSpec(
        name=offered.name,
        effect=offered.effect,
        description=offered.description,
        input_schema_json=offered.input_schema_json,
        server=offered.server,
        upstream=offered.upstream,
        upstream_kind=offered.upstream_kind,
        digest=offered.digest,
        journaled=offered.journaled,
        taints=offered.taints,
        call_timeout_s=offered.call_timeout_s,
    )


def input_type_of(tool: ToolSpec) -> Any:
    """The struct a call's input is checked against before anything runs."""
    return UpstreamInput if tool.server else _DEFINITIONS[tool.name].input_type


def tool_input_of(tool: ToolSpec, given: dict[str, Any]) -> msgspec.Struct:
    """A call's input as its tool takes it.

    Raises:
        msgspec.ValidationError: a built-in tool's input is not valid.
    """
    if tool.server:
        return UpstreamInput(arguments=given)
    converted: msgspec.Struct = msgspec.convert(given, _DEFINITIONS[tool.name].input_type)
    return converted


def is_journaled(tool: ToolSpec) -> bool:
    """Whether the journal keeps the tool's calls (the rule is `ToolDefinition`'s)."""
    return tool.journaled if tool.server else _DEFINITIONS[tool.name].journaled


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
) -> tuple[ToolSpec, ...]:
    """The tools a session with these settings gets, and each one's effect."""

    def offered(d: ToolDefinition) -> bool:
        if d.needs_web:
            return web and (search or not d.needs_search)
        return (
            workspace is not None
            and (shell or not d.needs_shell)
            and (skills_dir is not None or not d.needs_skills)
        )

    return tuple(
        ToolSpec(
            name=d.name,
            effect=d.effect if d.effect is not None else shell_effect(network),
            description=d.description,
            input_schema_json=input_schema_json(d.input_type),
        )
        for d in _DEFINITIONS.values()
        if offered(d)
    )


def definition(name: str) -> ToolDefinition:
    return _DEFINITIONS[name]


def find_tool(session: SessionInfo, name: str) -> ToolSpec | None:
    for tool in session.tools:
        if tool.name == name:
            return tool
    return None
