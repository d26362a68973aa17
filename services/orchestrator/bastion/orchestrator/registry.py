"""The registry of built-in tools: each defined once, with the service that runs it and how.

A tool's name, input struct (and so its JSON Schema) and effect are proto's
(`bastion.proto.toolinput.BUILTIN_TOOLS`, which the policy service reads too); here each
gets its description, the settings a session needs to be offered it, whether the journal
keeps its calls, the service that runs it, and its `run`: the request it builds from the
call and the text it renders of the reply. Running a call is a lookup here
(docs/architecture.md §2, step 11); an upstream MCP tool's is `UPSTREAM`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from bastion.orchestrator.coderun import run_code
from bastion.orchestrator.execute import run_check, run_file_tool, run_shell
from bastion.orchestrator.skillfind import find_skills
from bastion.orchestrator.skillrun import run_skill, write_skill
from bastion.orchestrator.skills import read_skill
from bastion.orchestrator.tasks import list_tasks, read_task, start_task, stop_task
from bastion.orchestrator.toolcall import Call
from bastion.orchestrator.upstream import call_upstream
from bastion.orchestrator.web import fetch_page, search_web
from bastion.proto.policy import Effect
from bastion.proto.session import ToolSpec
from bastion.proto.toolinput import BUILTIN_TOOLS

__all__ = [
    "REGISTRY",
    "UPSTREAM",
    "Route",
    "ServiceName",
    "ToolDefinition",
    "parents_calls",
    "route_of",
]

ServiceName = Literal["sandbox", "egress", "mcp"]
"""The service a call is sent to."""

Run = Callable[[Call, Any], Awaitable[str]]
"""A tool's run: the call's input → its request to the service → the text the model sees."""


@dataclass(frozen=True)
class Route:
    """Where a tool's calls go and how: the service that runs them, and the run."""

    service: ServiceName
    run: Run


@dataclass(frozen=True)
class ToolDefinition:
    """A built-in tool; `effect` None means it runs programs (see `catalogue.shell_effect`).

    `journaled`: a call that is neither read-only nor idempotent goes in the journal, so
    an identical call (same session, tool and input) is answered from it rather than
    made again, and one that got no answer is never repeated. The rule: every tool whose
    effect is not `read` — except `shell`, since a command given twice should run twice
    (a test suite after a fix), and the checks `diagnostics` and `run_tests`, which are
    asked again precisely to see what changed. A tool that declares itself idempotent
    (an upstream MCP tool's `idempotentHint`, as reviewed) is not journaled either.
    """

    name: str
    description: str
    route: Route
    needs_shell: bool = False
    journaled: bool = False
    needs_skills: bool = False
    needs_web: bool = False
    """Offered only to a session opened with `web` (fetch_url), workspace or not."""
    needs_search: bool = False
    """Offered only when a search provider is configured (`BASTION_SEARCH`)."""
    needs_bwrap: bool = False
    """Offered only to a session of the bwrap backend (`run_code`: docs/sandbox.md)."""
    parents_calls: bool = False
    """Its run makes calls that name it as their parent (`run_code`'s program): it keeps a
    record by call id while it runs even when sent without one, since a nested call is
    made only while its parent's record says it runs."""

    @property
    def input_type(self) -> Any:
        """The struct a call's input is checked against (proto's, with its bounds)."""
        return BUILTIN_TOOLS[self.name].input_type

    @property
    def effect(self) -> Effect | None:
        """The most a call can do (proto's; None: the session's network decides)."""
        return BUILTIN_TOOLS[self.name].effect


_FILES: Final = Route("sandbox", run_file_tool)
_CHECK: Final = Route("sandbox", run_check)

REGISTRY: Final[Mapping[str, ToolDefinition]] = MappingProxyType(
    {
        d.name: d
        for d in (
            ToolDefinition(
                "read_file", "Read a stretch of a workspace file, its lines numbered.", _FILES
            ),
            ToolDefinition("write_file", "Write a whole workspace file.", _FILES, journaled=True),
            ToolDefinition(
                "edit_file",
                "Replace old_string with new_string in a workspace file: it must be there "
                "once, or every time with replace_all.",
                _FILES,
                journaled=True,
            ),
            ToolDefinition(
                "apply_patch",
                "Apply a unified diff or a *** Begin Patch patch to workspace files: all of "
                "it, or nothing if any hunk does not fit.",
                _FILES,
                journaled=True,
            ),
            ToolDefinition(
                "list_files", "List a workspace directory; directories end with /.", _FILES
            ),
            ToolDefinition(
                "find_files",
                "Find workspace files by a glob (src/**/*.rs, *.{ts,tsx}; no / = any depth).",
                _FILES,
            ),
            ToolDefinition(
                "search_files",
                "Search workspace files by a regular expression, with lines around each match.",
                _FILES,
            ),
            ToolDefinition(
                "shell",
                "Run a command with /bin/sh in the workspace, inside the sandbox.",
                Route("sandbox", run_shell),
                needs_shell=True,
            ),
            ToolDefinition(
                "bg_run",
                "Start a command with /bin/sh in the background in the session's sandbox and "
                "return at once with its id (a dev server, a watcher, a long test run); "
                "later shell commands reach what it serves. timeout_ms: its wall clock.",
                Route("sandbox", start_task),
                needs_shell=True,
            ),
            ToolDefinition(
                "bg_list",
                "List this session's background tasks, newest first: id, label, status "
                "(running, stopping, succeeded, failed, cancelled, lost), exit code.",
                Route("sandbox", list_tasks),
                needs_shell=True,
            ),
            ToolDefinition(
                "bg_output",
                "Read a background task's output from a byte offset: 0 first, then the "
                "next_offset of the last answer; eof once it has ended and all was read.",
                Route("sandbox", read_task),
                needs_shell=True,
            ),
            ToolDefinition(
                "bg_stop",
                "Stop a background task: SIGTERM to its processes, SIGKILL 3 s later; it "
                "ends cancelled.",
                Route("sandbox", stop_task),
                needs_shell=True,
            ),
            ToolDefinition(
                "diagnostics",
                "Run the project's checker (ruff or compileall, cargo check, tsc, go vet) in "
                "the sandbox; its problems by file and line.",
                _CHECK,
                needs_shell=True,
            ),
            ToolDefinition(
                "run_tests",
                "Run the project's tests (make test, cargo test, go test, npm test, pytest) in "
                "the sandbox; counts, failures by name and the end of the output.",
                _CHECK,
                needs_shell=True,
            ),
            ToolDefinition(
                "fetch_url",
                "Fetch a public web page (http or https) as markdown, text or html; private "
                "and internal addresses are refused.",
                Route("egress", fetch_page),
                needs_web=True,
            ),
            ToolDefinition(
                "web_search",
                "Search the web: up to count results (5 unless asked, at most 10), each a "
                "title, an address and a snippet; freshness day, week, month or year keeps "
                "recent ones.",
                Route("egress", search_web),
                needs_web=True,
                needs_search=True,
            ),
            ToolDefinition(
                "skill_read",
                "Read a skill's SKILL.md by its name; once read, the calls its allowed-tools "
                "names may run without asking.",
                Route("sandbox", read_skill),
                needs_skills=True,
            ),
            ToolDefinition(
                "skill_find",
                "List the skills by name and description, with what each declares "
                "(allowed-tools, network, secret names, timeout, scripts); with query, "
                "those whose name, description or instructions hold its words, best first.",
                Route("sandbox", find_skills),
                needs_skills=True,
            ),
            ToolDefinition(
                "skill_run",
                "Run one of a skill's scripts in the sandbox, with arguments: the skill's "
                "files read-only at /skill, the workspace at /workspace where it starts.",
                Route("sandbox", run_skill),
                needs_shell=True,
                needs_skills=True,
            ),
            ToolDefinition(
                "skill_write",
                "Write a skill's SKILL.md from a name, a description and instructions "
                "(nothing else: no scripts, no permissions).",
                Route("sandbox", write_skill),
                journaled=True,
                needs_skills=True,
            ),
            ToolDefinition(
                "run_code",
                "Run a Python program (standard library only; no workspace, no network) that "
                "calls this session's tools that read as functions: tools.read_file(path=...) "
                "or call('read_file', path=...) returns the tool's text and raises ToolError "
                "when it fails; at most 200 calls, and only what it prints comes back.",
                Route("sandbox", run_code),
                needs_shell=True,
                needs_bwrap=True,
                parents_calls=True,
            ),
        )
    }
)
"""Every built-in tool by name, in the order a session's catalogue lists them: the one
table from a tool's name to the service that runs it (`route.service`) and how."""

UPSTREAM: Final = Route("mcp", call_upstream)
"""Every upstream MCP tool's route: through the mcp service, to its server."""


def route_of(tool: ToolSpec) -> Route:
    """Where a call of `tool` goes: an upstream tool's server, else its registry entry."""
    return UPSTREAM if tool.server else REGISTRY[tool.name].route


def parents_calls(tool: ToolSpec) -> bool:
    """Whether a call of `tool` makes calls naming it as their parent (`run_code`)."""
    return not tool.server and REGISTRY[tool.name].parents_calls
