"""Every NATS subject Bastion uses: versioned, named by noun then verb."""

from __future__ import annotations

from typing import Final

__all__ = [
    "EGRESS_FETCH",
    "EVENTS_ALL",
    "MCP_CALL",
    "POLICY_DECIDE",
    "POLICY_STATUS",
    "PREFIX",
    "SANDBOX_CHECK",
    "SANDBOX_CHECK_CODE",
    "SANDBOX_EXEC",
    "SANDBOX_FILES",
    "SANDBOX_RELEASE",
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

POLICY_DECIDE: Final = f"{PREFIX}.policy.decide"
POLICY_STATUS: Final = f"{PREFIX}.policy.status"
"""A policy instance answers with the operator policies it enforces and any rejected files."""
SANDBOX_EXEC: Final = f"{PREFIX}.sandbox.exec"
SANDBOX_FILES: Final = f"{PREFIX}.sandbox.files"
SANDBOX_CHECK: Final = f"{PREFIX}.sandbox.check"
SANDBOX_CHECK_CODE: Final = f"{PREFIX}.sandbox.check_code"
"""`diagnostics` and `run_tests`: the workspace's checker or tests, run in its sandbox."""
SANDBOX_RELEASE: Final = f"{PREFIX}.sandbox.release"
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
