"""What the policy knows of tool names: which take a path, a host, a command or a script."""

from __future__ import annotations

import posixpath
from typing import Final, Literal

__all__ = [
    "BG_RUN_TOOL",
    "FETCH_TOOL",
    "GROUPS",
    "HOST_TOOLS",
    "PATH_TOOLS",
    "SHELL_TOOL",
    "SKILL_RUN_TOOL",
    "TargetKind",
    "group_of",
    "normalised_target",
    "target_kind",
]

SHELL_TOOL: Final = "shell"
FETCH_TOOL: Final = "fetch_url"
SKILL_RUN_TOOL: Final = "skill_run"
BG_RUN_TOOL: Final = "bg_run"
"""Starts a command in the background: its target is the command, as a shell call's."""

PATH_TOOLS: Final = frozenset(
    {
        "read_file",
        "write_file",
        "edit_file",
        "apply_patch",
        "list_files",
        "find_files",
        "search_files",
    }
)
"""Tools whose target is a path relative to the workspace."""

HOST_TOOLS: Final = frozenset({FETCH_TOOL})
"""Tools whose target is a host name."""

GROUPS: Final[dict[str, frozenset[str]]] = {
    "writes_paths": frozenset({"write_file", "edit_file", "apply_patch", "skill_write"}),
    "runs_commands": frozenset(
        {
            "shell",
            "run_tests",
            "diagnostics",
            "skill_run",
            "bg_run",
            "bg_list",
            "bg_output",
            "bg_stop",
            "run_code",
        }
    ),
}
"""Tools that do the same thing: a policy on one of them holds for each (`ToolGroup` in
the Cedar schema): every tool that writes workspace files, every tool that runs commands."""

TargetKind = Literal["command", "path", "host", "script", "none"]


def target_kind(tool: str) -> TargetKind:
    """What a call of `tool` puts in `PolicyRequest.target`."""
    if tool in (SHELL_TOOL, BG_RUN_TOOL):
        return "command"
    if tool in PATH_TOOLS:
        return "path"
    if tool in HOST_TOOLS:
        return "host"
    if tool == SKILL_RUN_TOOL:
        return "script"
    return "none"


def group_of(tool: str) -> tuple[str, frozenset[str]] | None:
    """The group `tool` belongs to, and its members, if any."""
    for name, members in GROUPS.items():
        if tool in members:
            return name, members
    return None


def normalised_target(tool: str, target: str) -> str:
    """`target` as policies should see it: a path tool's path without `.` or `a/..` detours.

    A caller should send it so already; this keeps `notes/../secrets/key` from slipping
    past a rule about `secrets/*`.
    """
    if target_kind(tool) != "path" or not target:
        return target
    return posixpath.normpath(target)
