"""The input of each built-in tool, as an agent writes it: unknown fields refused, sizes bounded.

The orchestrator validates a call's `input` against the tool's struct here before anything
runs, and the same structs give the JSON Schema a client is shown for each tool. A sandbox
file request carries its tool's input as it is (`bastion.proto.sandbox`).

`BUILTIN_TOOLS` names every built-in tool with its input and its effect: the
orchestrator's registry is built on it, and the policy service reads it (neither may
import the other).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Final, Literal, NamedTuple

import msgspec

from bastion.proto._base import MAX_PATH, MAX_TEXT, PATH_PATTERN, Ingress, name_meta
from bastion.proto.policy import Effect

__all__ = [
    "BUILTIN_TOOLS",
    "ApplyPatchInput",
    "BgListInput",
    "BgOutputInput",
    "BgRunInput",
    "BgStopInput",
    "BuiltinTool",
    "DiagnosticsInput",
    "EditFileInput",
    "FetchUrlInput",
    "FindFilesInput",
    "ListFilesInput",
    "ReadFileInput",
    "RunCodeInput",
    "RunTestsInput",
    "SearchFilesInput",
    "ShellInput",
    "SkillFindInput",
    "SkillReadInput",
    "SkillRunInput",
    "SkillWriteInput",
    "WebSearchInput",
    "WriteFileInput",
]

ToolPath = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_PATH,
        pattern=PATH_PATTERN,
        description="A path relative to the workspace.",
    ),
]

DirPath = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_PATH,
        pattern=PATH_PATTERN,
        description="A directory relative to the workspace; `.` is the workspace itself.",
    ),
]
Pattern = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]


class ShellInput(Ingress, frozen=True, kw_only=True):
    """`shell`: one command for `/bin/sh -c`, run in the workspace inside the sandbox."""

    command: Annotated[str, msgspec.Meta(min_length=1, max_length=256 * 1024)]
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] | None = None


TASK_ID_PATTERN: Final = r"^[0-9A-HJKMNP-TV-Z]{26}$"
"""A background task's id: a ULID (48 bits of time, 80 random bits)."""
TaskId = Annotated[
    str, msgspec.Meta(pattern=TASK_ID_PATTERN, description="The task's id, as bg_run gave it.")
]
TaskStatus = Literal["running", "stopping", "succeeded", "failed", "cancelled", "lost"]
"""A background task's state: `running`, `stopping` (asked to stop), then one of the four
ends, never left."""
MAX_TASK_RUN_MS: Final = 24 * 3600 * 1000


class BgRunInput(Ingress, frozen=True, kw_only=True):
    """`bg_run`: one command for `/bin/sh -c`, started in the background in the sandbox."""

    command: Annotated[str, msgspec.Meta(min_length=1, max_length=8000)]
    cwd: DirPath | None = None
    label: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    timeout_ms: Annotated[int, msgspec.Meta(ge=1000, le=MAX_TASK_RUN_MS)] | None = None


class BgListInput(Ingress, frozen=True, kw_only=True):
    """`bg_list`: the session's background tasks, newest first."""

    status: TaskStatus | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=50)] = 50


class BgOutputInput(Ingress, frozen=True, kw_only=True):
    """`bg_output`: a task's output from a byte offset (0 first, then the last next_offset)."""

    id: TaskId
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=65536)] = 16384


class BgStopInput(Ingress, frozen=True, kw_only=True):
    """`bg_stop`: stop a task (SIGTERM to its processes, SIGKILL 3 s later)."""

    id: TaskId


class ReadFileInput(Ingress, frozen=True, kw_only=True):
    """`read_file`: a stretch of a file, lines numbered from `offset`."""

    path: ToolPath
    offset: Annotated[int, msgspec.Meta(ge=1)] = 1
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 2000


class WriteFileInput(Ingress, frozen=True, kw_only=True):
    """`write_file`: a whole file's new content."""

    path: ToolPath
    content: Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]


class EditFileInput(Ingress, frozen=True, kw_only=True):
    """`edit_file`: replace a quoted stretch of a file, once or (`replace_all`) every time."""

    path: ToolPath
    old_string: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT)]
    new_string: Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
    replace_all: bool = False


class ApplyPatchInput(Ingress, frozen=True, kw_only=True):
    """`apply_patch`: a unified diff or a `*** Begin Patch` patch, applied whole or not at all."""

    patch: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT)]


class ListFilesInput(Ingress, frozen=True, kw_only=True):
    """`list_files`: the entries of a directory, directories marked with `/`."""

    path: DirPath = "."


class FindFilesInput(Ingress, frozen=True, kw_only=True):
    """`find_files`: files by a glob (`src/**/*.rs`, `*.{ts,tsx}`; no `/` = any depth)."""

    pattern: Pattern
    path: DirPath = "."


class SearchFilesInput(Ingress, frozen=True, kw_only=True):
    """`search_files`: lines matching a regular expression, with `context` lines around."""

    pattern: Pattern
    path: DirPath = "."
    glob: Pattern | None = None
    context: Annotated[int, msgspec.Meta(ge=0, le=20)] = 2
    case_insensitive: bool = False


class DiagnosticsInput(Ingress, frozen=True, kw_only=True):
    """`diagnostics`: run the project's checker in the sandbox; no input."""


class RunTestsInput(Ingress, frozen=True, kw_only=True):
    """`run_tests`: run the project's tests in the sandbox; no input."""


SkillNameInput = Annotated[str, name_meta(64, "The skill's name: its directory in the skills dir.")]


class SkillReadInput(Ingress, frozen=True, kw_only=True):
    """`skill_read`: a skill's SKILL.md by the skill's name (its directory in the skills dir)."""

    name: SkillNameInput


class SkillFindInput(Ingress, frozen=True, kw_only=True):
    """`skill_find`: the skills dir's skills and what each declares; with `query`, those
    whose name, description or instructions hold its words, best first."""

    query: (
        Annotated[
            str,
            msgspec.Meta(
                min_length=1,
                max_length=400,
                description="Words to look for in the skills' names, descriptions and bodies.",
            ),
        ]
        | None
    ) = None


class SkillRunInput(Ingress, frozen=True, kw_only=True):
    """`skill_run`: one of a skill's scripts, with arguments (never read by a shell)."""

    name: SkillNameInput
    script: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=MAX_PATH,
            description="The script's path inside the skill (scripts/count.py).",
        ),
    ]
    args: Annotated[
        tuple[Annotated[str, msgspec.Meta(max_length=64 * 1024)], ...],
        msgspec.Meta(max_length=256),
    ] = ()


class SkillWriteInput(Ingress, frozen=True, kw_only=True):
    """`skill_write`: a skill's SKILL.md from a name, a description and instructions."""

    name: SkillNameInput
    description: Annotated[str, msgspec.Meta(max_length=1024)]
    instructions: Annotated[str, msgspec.Meta(max_length=200 * 1024)]


class FetchUrlInput(Ingress, frozen=True, kw_only=True):
    """`fetch_url`: a public page, as markdown (default), text or html."""

    url: Annotated[str, msgspec.Meta(min_length=1, max_length=8192)]
    format: Literal["markdown", "text", "html"] = "markdown"


class WebSearchInput(Ingress, frozen=True, kw_only=True):
    """`web_search`: up to `count` results (5 by default, at most 10), optionally recent only."""

    query: Annotated[str, msgspec.Meta(min_length=1, max_length=400)]
    count: Annotated[int, msgspec.Meta(ge=1, le=10)] = 5
    freshness: Literal["day", "week", "month", "year"] | None = None


MAX_CODE: Final = 64 * 1024
"""The most of a `run_code` program, in characters."""


class RunCodeInput(Ingress, frozen=True, kw_only=True):
    """`run_code`: a Python program (standard library only) that calls the session's tools
    that read, as `tools.<name>(**input)` or `call(name, **input)`; what it prints comes back."""

    code: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CODE)]


class BuiltinTool(NamedTuple):
    """A built-in tool as every service may know it: the input it takes, the most it can do."""

    input_type: type[Ingress]
    effect: Effect | None
    """None: it runs programs, so its effect is the session's network's (`write`, or
    `external` with the machine's network)."""


BUILTIN_TOOLS: Final[Mapping[str, BuiltinTool]] = MappingProxyType(
    {
        "read_file": BuiltinTool(ReadFileInput, "read"),
        "write_file": BuiltinTool(WriteFileInput, "write"),
        "edit_file": BuiltinTool(EditFileInput, "write"),
        "apply_patch": BuiltinTool(ApplyPatchInput, "write"),
        "list_files": BuiltinTool(ListFilesInput, "read"),
        "find_files": BuiltinTool(FindFilesInput, "read"),
        "search_files": BuiltinTool(SearchFilesInput, "read"),
        "shell": BuiltinTool(ShellInput, None),
        "bg_run": BuiltinTool(BgRunInput, None),
        "bg_list": BuiltinTool(BgListInput, None),
        "bg_output": BuiltinTool(BgOutputInput, None),
        "bg_stop": BuiltinTool(BgStopInput, None),
        "diagnostics": BuiltinTool(DiagnosticsInput, None),
        "run_tests": BuiltinTool(RunTestsInput, None),
        "fetch_url": BuiltinTool(FetchUrlInput, "external"),
        "web_search": BuiltinTool(WebSearchInput, "external"),
        "skill_read": BuiltinTool(SkillReadInput, "read"),
        "skill_find": BuiltinTool(SkillFindInput, "read"),
        "skill_run": BuiltinTool(SkillRunInput, "write"),
        "skill_write": BuiltinTool(SkillWriteInput, "write"),
        "run_code": BuiltinTool(RunCodeInput, "read"),
    }
)
"""Every built-in tool by name, in the order a session's catalogue lists them."""
