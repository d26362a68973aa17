"""`skill_read`: a skill's SKILL.md from the sandbox service, and its rules as pre-approvals.

Once a session has read a skill, the skill's `allowed-tools` join the session's
pre-approvals with the source `skill <name>` (durably, in the session's state); the
policy decides what they cover, and ignores them under `--no-skill-approvals` or taint.
"""

from __future__ import annotations

import msgspec

from bastion.orchestrator.toolcall import Call
from bastion.proto import subjects
from bastion.proto.policy import SKILL_SOURCE_PREFIX, PreApproval
from bastion.proto.sandbox import ReadSkill, SkillDocument
from bastion.proto.session import SessionInfo
from bastion.proto.toolinput import SkillReadInput
from bastion.shared.bus import Client, request

__all__ = ["fetch_skill", "read_skill", "skill_pre_approvals", "with_pre_approvals"]


async def fetch_skill(
    client: Client, session: SessionInfo, name: str, timeout_s: float
) -> SkillDocument:
    """The skill `name` of the session's skills dir, as the sandbox service read it."""
    assert session.skills_dir is not None  # only sessions with skills have skill_read
    document: SkillDocument = await request(
        client,
        subjects.SANDBOX_SKILL_READ,
        ReadSkill(
            session_id=session.session_id,
            skills_dir=session.skills_dir,
            name=name,
            tenant=session.tenant,
        ),
        SkillDocument,
        timeout_s=timeout_s,
    )
    return document


def skill_pre_approvals(name: str, document: SkillDocument) -> tuple[PreApproval, ...]:
    """The skill's `allowed-tools`, each as a pre-approval granted by `skill <name>`."""
    source = f"{SKILL_SOURCE_PREFIX}{name}"
    return tuple(PreApproval(rule=rule, source=source) for rule in document.allowed_tools)


def with_pre_approvals(session: SessionInfo, added: tuple[PreApproval, ...]) -> SessionInfo:
    """`session` with `added` in force too (a rule already there from the same source is kept
    once)."""
    known = set(session.pre_approvals)
    new = tuple(a for a in dict.fromkeys(added) if a not in known)
    if not new:
        return session
    return msgspec.structs.replace(session, pre_approvals=session.pre_approvals + new)


async def read_skill(call: Call, given: SkillReadInput) -> str:
    """`skill_read`: the skill's text; its rules join the session's pre-approvals."""
    document = await fetch_skill(call.client, call.session, given.name, call.timeout_s)
    added = skill_pre_approvals(given.name, document)
    await call.store.update(call.session.session_id, lambda s: with_pre_approvals(s, added))
    return document.text
