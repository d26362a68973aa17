"""Every NATS subject Bastion uses: versioned, named by noun then verb."""

from __future__ import annotations

from typing import Final

__all__ = [
    "APPROVALS_ANSWER",
    "APPROVALS_LIST",
    "EGRESS_FETCH",
    "EVENTS_ALL",
    "MCP_CALL",
    "POLICY_CHECK_RULE",
    "POLICY_DECIDE",
    "POLICY_STATUS",
    "PREFIX",
    "SANDBOX_CHECK",
    "SANDBOX_CHECK_CODE",
    "SANDBOX_EXEC",
    "SANDBOX_FILES",
    "SANDBOX_RELEASE",
    "SANDBOX_SKILL_READ",
    "SESSION_CALL_ANY",
    "SESSION_CLOSE",
    "SESSION_GET",
    "SESSION_OPEN",
    "VAULT_LEASE",
    "event",
    "session_call",
]

PREFIX: Final = "bastion.v1"

SESSION_OPEN: Final = f"{PREFIX}.session.open"
SESSION_GET: Final = f"{PREFIX}.session.get"
SESSION_CLOSE: Final = f"{PREFIX}.session.close"
SESSION_CALL_ANY: Final = f"{PREFIX}.session.*.call"
"""The orchestrator listens here; the `*` is the session id."""

APPROVALS_LIST: Final = f"{PREFIX}.approvals.list"
"""The orchestrator answers with the parked calls (all, or of one session or tenant)."""
APPROVALS_ANSWER: Final = f"{PREFIX}.approvals.answer"
"""A person approves (once, or always with a rule) or declines one parked call."""

POLICY_DECIDE: Final = f"{PREFIX}.policy.decide"
POLICY_CHECK_RULE: Final = f"{PREFIX}.policy.check_rule"
"""Is this pre-approval rule valid and does it cover this call (or: the rule of exactly it)?"""
POLICY_STATUS: Final = f"{PREFIX}.policy.status"
"""A policy instance answers with the operator policies it enforces and any rejected files."""
SANDBOX_EXEC: Final = f"{PREFIX}.sandbox.exec"
SANDBOX_FILES: Final = f"{PREFIX}.sandbox.files"
SANDBOX_CHECK: Final = f"{PREFIX}.sandbox.check"
SANDBOX_CHECK_CODE: Final = f"{PREFIX}.sandbox.check_code"
"""`diagnostics` and `run_tests`: the workspace's checker or tests, run in its sandbox."""
SANDBOX_RELEASE: Final = f"{PREFIX}.sandbox.release"
SANDBOX_SKILL_READ: Final = f"{PREFIX}.sandbox.skill_read"
"""A skill's SKILL.md, read confined to the session's skills dir, with its front matter."""
EGRESS_FETCH: Final = f"{PREFIX}.egress.fetch"
MCP_CALL: Final = f"{PREFIX}.mcp.call"
VAULT_LEASE: Final = f"{PREFIX}.vault.lease"

EVENTS_ALL: Final = f"{PREFIX}.events.>"


def session_call(session_id: str) -> str:
    """The subject a call of `session_id` is sent to."""
    return f"{PREFIX}.session.{session_id}.call"


def event(kind: str, tenant: str) -> str:
    """The subject an event of `kind` (e.g. `call_finished`) for `tenant` is published on."""
    return f"{PREFIX}.events.{kind}.{tenant}"
