"""What the policy is told about a call (its target, the rules in force, taint), and asking it.

The policy service matches pre-approvals; the orchestrator only fills the request. A file
call's paths are first resolved by the sandbox service through the workspace's links
(`sandbox.resolve`, the walk the file tools make), so that a path rule judges where the
call lands, not the path the agent wrote: `notes/up/key` with `notes/up -> ..` is `key`.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import msgspec

from bastion.orchestrator.taint import is_tainted
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.policy import MAX_PATHS, PolicyDecision, PolicyRequest
from bastion.proto.sandbox import ResolvedPaths, ResolvePaths
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.toolinput import (
    ApplyPatchInput,
    BgRunInput,
    FetchUrlInput,
    ShellInput,
    SkillRunInput,
)
from bastion.shared.bus import Client, request
from bastion.shared.carry import carried
from bastion.shared.errors import BastionError, InvalidInput, RemoteError, Unavailable
from bastion.shared.hostnames import InvalidHostName, ascii_host

__all__ = [
    "WHOSE",
    "PolicyUnavailable",
    "Touched",
    "ask_policy",
    "policy_request",
    "target_for",
    "target_of",
    "touched_paths",
]

WHOSE = ("session_id", "tenant", "agent", "autonomy")
"""Whose a session is: what the policy is told of it with each call, and each event too."""

_PATH_FIELDS = ("path",)


class PolicyUnavailable(Unavailable):
    """No policy service answered: the call does not run (fail closed)."""


def _relative(path: str) -> str:
    """A tool's path as the workspace-relative path policies match (`notes/a.md`)."""
    if path == "/workspace" or path.startswith("/workspace/"):
        path = path.removeprefix("/workspace").lstrip("/") or "."
    return posixpath.normpath(path)


def target_of(tool_input: msgspec.Struct) -> str:
    """The call's target: the whole command of a shell call (never cut), a file tool's
    workspace-relative path, a fetch's host name, a skill's script path inside the skill,
    else empty (only a bare tool name then
    covers the call)."""
    if isinstance(tool_input, SkillRunInput):
        return posixpath.normpath(tool_input.script.removeprefix("/skill/"))
    if isinstance(tool_input, ShellInput | BgRunInput):
        return tool_input.command
    if isinstance(tool_input, FetchUrlInput):
        host = urlsplit(tool_input.url).hostname or ""
        try:
            return ascii_host(host)
        except InvalidHostName:
            return host  # never a domain rule's name: the call is asked about
    for name in _PATH_FIELDS:
        value = getattr(tool_input, name, None)
        if isinstance(value, str):
            return _relative(value)
    return ""


@dataclass(frozen=True)
class Touched:
    """The paths a call touches, resolved; or, in `problem`, why they could not be (a patch
    that does not parse, a path leading out of the workspace): the call fails with it
    unless the policy refuses it first, as the sandbox would fail it the same way."""

    paths: tuple[str, ...] = ()
    problem: BastionError | None = None


async def touched_paths(
    client: Client, session: SessionInfo, tool_input: msgspec.Struct, timeout_s: float
) -> Touched:
    """The workspace paths a file call touches, resolved through the workspace's links by
    the sandbox service (every file of an `apply_patch`); none for other calls."""
    if session.workspace is None:
        return Touched()
    path = next((getattr(tool_input, n) for n in _PATH_FIELDS if hasattr(tool_input, n)), None)
    if isinstance(tool_input, ApplyPatchInput):
        ask = ResolvePaths(
            session_id=session.session_id, workspace=session.workspace, patch=tool_input.patch
        )
    elif isinstance(path, str) and not isinstance(tool_input, SkillRunInput):
        ask = ResolvePaths(
            session_id=session.session_id, workspace=session.workspace, paths=(path,)
        )
    else:
        return Touched()
    try:
        resolved: ResolvedPaths = await request(
            client, subjects.SANDBOX_RESOLVE, ask, ResolvedPaths, timeout_s=timeout_s
        )
    except RemoteError as error:
        if error.code not in (codes.INVALID_INPUT, codes.NOT_FOUND):
            raise
        return Touched(problem=error)
    if len(resolved.paths) > MAX_PATHS:
        return Touched(
            problem=InvalidInput(
                f"the patch touches {len(resolved.paths)} files, more than the {MAX_PATHS} one "
                "call may: split it into several patches"
            )
        )
    return Touched(resolved.paths)


def target_for(tool_input: msgspec.Struct, paths: tuple[str, ...]) -> str:
    """The call's target: its first resolved path for a file call, else `target_of`."""
    return paths[0] if paths else target_of(tool_input)


def _summary(tool_input: dict[str, Any]) -> str:
    """A short, bounded description of a call's input for the policy (never logged whole)."""
    text = msgspec.json.encode(tool_input).decode()
    return text if len(text) <= 200 else text[:197] + "..."


def policy_request(
    session: SessionInfo,
    tool: ToolSpec,
    tool_input: msgspec.Struct,
    raw_input: dict[str, Any],
    now: datetime,
    *,
    paths: tuple[str, ...] = (),
) -> PolicyRequest:
    """The policy's view of one call of `session`; `paths` from `touched_paths`."""
    return PolicyRequest(
        **carried(session, WHOSE),
        tool=tool.name,
        effect=tool.effect,
        tainted=is_tainted(session, now),
        input_summary=_summary(raw_input),
        target=target_for(tool_input, paths),
        paths=paths,
        pre_approvals=session.pre_approvals,
        skill=tool_input.name if isinstance(tool_input, SkillRunInput) else "",
        skill_approvals=session.skill_approvals,
    )


async def ask_policy(client: Client, ask: PolicyRequest, timeout_s: float) -> PolicyDecision:
    """The policy's decision; no policy service answering means the call does not run.

    Raises:
        PolicyUnavailable: no policy service answered within `timeout_s`.
    """
    try:
        decision: PolicyDecision = await request(
            client, subjects.POLICY_DECIDE, ask, PolicyDecision, timeout_s=timeout_s
        )
    except Unavailable:
        raise PolicyUnavailable(
            f"the policy service does not answer, so {ask.tool} did not run: no call runs "
            "until a policy service answers again (check `bastion status`)"
        ) from None
    return decision
