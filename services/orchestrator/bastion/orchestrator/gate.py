"""What the policy is told about a call (its target, the rules in force, taint), and asking it.

The policy service matches pre-approvals; the orchestrator only fills the request.
"""

from __future__ import annotations

import posixpath
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import msgspec

from bastion.orchestrator.taint import is_tainted
from bastion.proto import subjects
from bastion.proto.policy import PolicyDecision, PolicyRequest
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.toolinput import FetchUrlInput, ShellInput, SkillRunInput
from bastion.shared.bus import Client, request
from bastion.shared.errors import Unavailable
from bastion.shared.hostnames import InvalidHostName, ascii_host

__all__ = ["PolicyUnavailable", "ask_policy", "policy_request", "target_of"]

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
    if isinstance(tool_input, ShellInput):
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
) -> PolicyRequest:
    """The policy's view of one call of `session`."""
    return PolicyRequest(
        session_id=session.session_id,
        tenant=session.tenant,
        agent=session.agent,
        autonomy=session.autonomy,
        tool=tool.name,
        effect=tool.effect,
        tainted=is_tainted(session, now),
        input_summary=_summary(raw_input),
        target=target_of(tool_input),
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
