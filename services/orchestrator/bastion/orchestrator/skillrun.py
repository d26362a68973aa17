"""`skill_run` and `skill_write`: what a skill's declarations make of a call, and sending it.

A skill's `metadata.bastion-network` decides the call's effect (`external` when it
declares any host, so its result taints) and the sandbox's network (`declared`, with its
hosts) — only where the session's sandbox has a network: under `none` its scripts get no
network at all, and the call is a `write`; `bastion-secrets` are leased for this one
call; `bastion-timeout` shortens the session's wall clock, never lengthens it. A skill
that declares nothing gets nothing.
"""

from __future__ import annotations

import shlex

import msgspec

from bastion.orchestrator.execute import format_exec_result
from bastion.orchestrator.skills import fetch_skill
from bastion.orchestrator.toolcall import Call
from bastion.proto import subjects
from bastion.proto.policy import Effect
from bastion.proto.sandbox import (
    ExecRequest,
    ExecResult,
    FileResult,
    Limits,
    RunSkill,
    SkillDocument,
    WriteSkill,
)
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.toolinput import SkillRunInput, SkillWriteInput
from bastion.shared.bus import Client
from bastion.shared.errors import InvalidInput

__all__ = ["run_skill", "skill_limits", "skill_run_request", "skill_tool", "write_skill"]


def _hosts(session: SessionInfo, document: SkillDocument) -> tuple[str, ...]:
    """The hosts the skill's scripts may reach here: what it declares, unless the session's
    sandbox has no network at all."""
    return () if session.network == "none" else document.network


def _effect_of(session: SessionInfo, document: SkillDocument) -> Effect:
    return "external" if _hosts(session, document) else "write"


async def skill_tool(
    client: Client,
    session: SessionInfo,
    tool: ToolSpec,
    tool_input: msgspec.Struct,
    timeout_s: float,
) -> ToolSpec:
    """`tool` with the effect this call has: a `skill_run` of a skill that declares network,
    in a session with a network, reaches outside; every other call keeps the tool's own."""
    if not isinstance(tool_input, SkillRunInput):
        return tool
    document = await fetch_skill(client, session, tool_input.name, timeout_s)
    effect = _effect_of(session, document)
    return tool if effect == tool.effect else msgspec.structs.replace(tool, effect=effect)


def skill_limits(session: Limits, document: SkillDocument) -> Limits:
    """The session's limits, the wall clock cut to the skill's timeout when that is shorter."""
    if document.timeout_s is None or document.timeout_s >= session.wall_s:
        return session
    return msgspec.structs.replace(session, wall_s=document.timeout_s)


def skill_run_request(
    session: SessionInfo, document: SkillDocument, tool_input: SkillRunInput, call_id: str
) -> RunSkill:
    """What the sandbox service is asked: the script, and the run its skill declares."""
    assert session.workspace is not None and session.skills_dir is not None
    hosts = _hosts(session, document)
    return RunSkill(
        skills_dir=session.skills_dir,
        **msgspec.structs.asdict(tool_input),
        exec=ExecRequest(
            session_id=session.session_id,
            workspace=session.workspace,
            command=shlex.join([f"/skill/{tool_input.script}", *tool_input.args]),
            backend=session.sandbox,
            network="declared" if hosts else "none",
            limits=skill_limits(session.limits, document),
            read_only_dirs=session.read_only_dirs,
            tenant=session.tenant,
            call_id=call_id if document.secrets else "",
            secrets=document.secrets,
            declared_hosts=hosts,
        ),
    )


async def run_skill(call: Call, given: SkillRunInput) -> str:
    """Run the script as its skill declares, now; a skill that came to declare network
    after the call was decided is refused (the decision was for another effect)."""
    document = await fetch_skill(call.client, call.session, given.name, call.timeout_s)
    if _effect_of(call.session, document) != call.tool.effect:
        raise InvalidInput(
            f"skill {given.name!r} changed what it declares while the call waited: "
            "nothing ran; make the call again"
        )
    ask = skill_run_request(call.session, document, given, call.call_id)
    wall_s = ask.exec.limits.wall_s + call.timeout_s
    result = await call.ask(subjects.SANDBOX_SKILL_RUN, ask, ExecResult, timeout_s=wall_s)
    return format_exec_result(result)


async def write_skill(call: Call, given: SkillWriteInput) -> str:
    """Write the skill's SKILL.md through the sandbox service, which owns the skills dir."""
    session = call.session
    assert session.skills_dir is not None
    message = WriteSkill(
        session_id=session.session_id,
        skills_dir=session.skills_dir,
        **msgspec.structs.asdict(given),
    )
    answer = await call.ask(subjects.SANDBOX_SKILL_WRITE, message, FileResult)
    return answer.text
