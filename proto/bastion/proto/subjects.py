"""Every NATS subject Bastion uses: versioned, named by noun then verb."""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "APPROVALS_ANSWER",
    "APPROVALS_BUCKET",
    "APPROVALS_LIST",
    "AUDIT_ALL",
    "AUDIT_STREAM",
    "CALLS_BUCKET",
    "CALLS_CANCEL",
    "CALLS_OUTPUT_ANY",
    "EGRESS_CONNECTIONS",
    "EGRESS_CONNECTIONS_BUCKET",
    "EGRESS_FETCH",
    "EGRESS_GRANT",
    "EGRESS_GRANTS_BUCKET",
    "EGRESS_SEARCH",
    "EVENTS_ALL",
    "FRONTDOOR_SESSIONS_BUCKET",
    "FRONTDOOR_SLOTS_BUCKET",
    "FRONTDOOR_TOKENS_BUCKET",
    "FRONTDOOR_TOKEN_CREATE",
    "FRONTDOOR_TOKEN_LIST",
    "FRONTDOOR_TOKEN_REVOKE",
    "FRONTDOOR_TOKEN_REVOKED",
    "HOOKS_BUCKET",
    "JOURNAL_BUCKET",
    "MCP_ADD",
    "MCP_BROWSE",
    "MCP_CALL",
    "MCP_LIST",
    "MCP_OFFER",
    "MCP_PREFETCH",
    "MCP_REMOVE",
    "MCP_REVIEW",
    "MCP_SERVERS_BUCKET",
    "POLICY_CHECK_PATHS",
    "POLICY_CHECK_RULE",
    "POLICY_DECIDE",
    "POLICY_STATUS",
    "PREFIX",
    "QUOTA_BUCKET",
    "REPLY_INBOX_HEADER",
    "SANDBOX_CHECK",
    "SANDBOX_CHECK_CODE",
    "SANDBOX_EXEC",
    "SANDBOX_FILES",
    "SANDBOX_RELEASE",
    "SANDBOX_RESOLVE",
    "SANDBOX_RUN_CODE",
    "SANDBOX_SKILL_FIND",
    "SANDBOX_SKILL_READ",
    "SANDBOX_SKILL_RUN",
    "SANDBOX_SKILL_WRITE",
    "SANDBOX_SLOTS_BUCKET",
    "SANDBOX_TASKS_BUCKET",
    "SANDBOX_TASKS_HELD_ANY",
    "SANDBOX_TASK_LIST",
    "SANDBOX_TASK_OUTPUT",
    "SANDBOX_TASK_START",
    "SANDBOX_TASK_STOP",
    "SESSIONS_BUCKET",
    "SESSION_CALL_ANY",
    "SESSION_CANCEL_ANY",
    "SESSION_CHECK",
    "SESSION_CLOSE",
    "SESSION_GET",
    "SESSION_NESTED_ANY",
    "SESSION_OPEN",
    "SESSION_RUN",
    "TURNS_BUCKET",
    "VAULT_ADD",
    "VAULT_KEY",
    "VAULT_KEYS_BUCKET",
    "VAULT_LEASE",
    "VAULT_LIST",
    "VAULT_REDACTION",
    "VAULT_REMOVE",
    "VAULT_ROTATE",
    "VAULT_SECRETS_BUCKET",
    "audit",
    "call_output",
    "event",
    "hook",
    "mcp_elicit",
    "mcp_sample",
    "reply_subject",
    "sandbox_task_held",
    "session_call",
    "session_cancel",
    "session_nested",
]

PREFIX: Final = "bastion.v1"

SESSION_OPEN: Final = f"{PREFIX}.session.open"
SESSION_GET: Final = f"{PREFIX}.session.get"
SESSION_CLOSE: Final = f"{PREFIX}.session.close"
SESSION_CHECK: Final = f"{PREFIX}.session.check"
"""A session's opening checked, nothing opened: how a front-door token's profile is checked."""
SESSION_CALL_ANY: Final = f"{PREFIX}.session.*.call"
"""The orchestrator listens here; the `*` is the session id."""
SESSION_NESTED_ANY: Final = f"{PREFIX}.session.*.nested"
"""A `run_code` program's calls, relayed by the sandbox service alone; `*` is the session id."""
SESSION_CANCEL_ANY: Final = f"{PREFIX}.session.*.cancel"
"""Cancel one running call of the session (the `*`): whoever may call in a session may
cancel there, and only there."""
CALLS_CANCEL: Final = f"{PREFIX}.calls.cancel"
"""The orchestrator tells every replica of itself, the sandbox and the mcp service to stop
one call: each stops what it runs of it (a broadcast, no answer)."""

APPROVALS_LIST: Final = f"{PREFIX}.approvals.list"
"""The orchestrator answers with the parked calls (all, or of one session or tenant)."""
APPROVALS_ANSWER: Final = f"{PREFIX}.approvals.answer"
"""A person approves (once, or always with a rule) or declines one parked call."""

POLICY_DECIDE: Final = f"{PREFIX}.policy.decide"
POLICY_CHECK_RULE: Final = f"{PREFIX}.policy.check_rule"
"""Is this pre-approval rule valid and does it cover this call (or: the rule of exactly it)?"""
POLICY_CHECK_PATHS: Final = f"{PREFIX}.policy.check_paths"
"""Which of the paths a listing or search would show do operator policies keep from it?"""
POLICY_STATUS: Final = f"{PREFIX}.policy.status"
"""A policy instance answers with the operator policies it enforces and any rejected files."""
SANDBOX_EXEC: Final = f"{PREFIX}.sandbox.exec"
CALLS_OUTPUT_ANY: Final = f"{PREFIX}.calls.output.*.*"
"""Every call's streamed output: `calls.output.<session>.<call id>` (`call_output`)."""
SANDBOX_FILES: Final = f"{PREFIX}.sandbox.files"
SANDBOX_CHECK: Final = f"{PREFIX}.sandbox.check"
SANDBOX_CHECK_CODE: Final = f"{PREFIX}.sandbox.check_code"
"""`diagnostics` and `run_tests`: the workspace's checker or tests, run in its sandbox."""
SANDBOX_RELEASE: Final = f"{PREFIX}.sandbox.release"
SANDBOX_SKILL_READ: Final = f"{PREFIX}.sandbox.skill_read"
"""A skill's SKILL.md, read confined to the session's skills dir, with its front matter."""
SANDBOX_SKILL_FIND: Final = f"{PREFIX}.sandbox.skill_find"
"""The skills of the session's skills dir and what each declares, or those matching words."""
SANDBOX_SKILL_RUN: Final = f"{PREFIX}.sandbox.skill_run"
"""One of a skill's scripts, run in the session's sandbox with the skill at `/skill`."""
SANDBOX_SKILL_WRITE: Final = f"{PREFIX}.sandbox.skill_write"
"""A skill's SKILL.md written with only its name, description and instructions."""
SANDBOX_RUN_CODE: Final = f"{PREFIX}.sandbox.run_code"
"""A `run_code` program, run with no workspace and no network, its tool calls relayed."""
SANDBOX_RESOLVE: Final = f"{PREFIX}.sandbox.resolve"
"""The workspace paths a file call touches, resolved through its links, for the policy."""
SANDBOX_TASK_START: Final = f"{PREFIX}.sandbox.task_start"
"""`bg_run`: a command started in the background in the session's sandbox."""
SANDBOX_TASK_LIST: Final = f"{PREFIX}.sandbox.task_list"
SANDBOX_TASK_OUTPUT: Final = f"{PREFIX}.sandbox.task_output"
SANDBOX_TASK_STOP: Final = f"{PREFIX}.sandbox.task_stop"
SANDBOX_TASKS_HELD_ANY: Final = f"{PREFIX}.sandbox.tasks.*.*"
"""What one sandbox replica alone serves for the tasks it runs (`sandbox_task_held`): the
replica that got a request for another's task forwards it there."""
EGRESS_FETCH: Final = f"{PREFIX}.egress.fetch"
EGRESS_SEARCH: Final = f"{PREFIX}.egress.search"
"""A web search through the provider the egress service is configured with."""
EGRESS_GRANT: Final = f"{PREFIX}.egress.grant"
"""Issue a grant: one call's programs may reach its declared hosts through the proxy."""
EGRESS_CONNECTIONS: Final = f"{PREFIX}.egress.connections"
"""The connections made or refused under one grant, to append to a script's result."""
MCP_CALL: Final = f"{PREFIX}.mcp.call"
"""A session's call of an upstream tool (or of its resources tools)."""
MCP_PREFETCH: Final = f"{PREFIX}.mcp.prefetch"
"""An upstream tool's call is coming: its connection starts the listing its pin check awaits
(published, not answered)."""
MCP_OFFER: Final = f"{PREFIX}.mcp.offer"
"""Which upstream tools a session may be offered, checked against their pins."""
MCP_ADD: Final = f"{PREFIX}.mcp.add"
MCP_REVIEW: Final = f"{PREFIX}.mcp.review"
MCP_LIST: Final = f"{PREFIX}.mcp.list"
MCP_REMOVE: Final = f"{PREFIX}.mcp.remove"
MCP_BROWSE: Final = f"{PREFIX}.mcp.browse"
"""Operator operations: add (review and pin), review (accept), list, remove, and look at a
server's resources and prompts."""
MCP_SERVERS_BUCKET: Final = "bastion_mcp_servers"
"""The JetStream KV bucket of upstream servers and their pins (key: `<tenant>.<name>`)."""
VAULT_LEASE: Final = f"{PREFIX}.vault.lease"
"""The sandbox service asks for one call's secrets, sealed to its public key."""
VAULT_REDACTION: Final = f"{PREFIX}.vault.redaction"
"""All of a tenant's secret values, sealed to the sandbox or mcp service, to cut them out
of every reply: a value leased once may have been written into a workspace."""
VAULT_KEY: Final = f"{PREFIX}.vault.key"
"""The vault's transport public key: values are sealed to it on their way in."""
FRONTDOOR_TOKEN_CREATE: Final = f"{PREFIX}.frontdoor.tokens.create"
FRONTDOOR_TOKEN_LIST: Final = f"{PREFIX}.frontdoor.tokens.list"
FRONTDOOR_TOKEN_REVOKE: Final = f"{PREFIX}.frontdoor.tokens.revoke"
"""Operator operations on agents' front-door tokens: mint one, list them, revoke one."""
FRONTDOOR_TOKEN_REVOKED: Final = f"{PREFIX}.frontdoor.tokens.revoked"
"""A token was revoked (`TokenWithdrawn`): every mcp replica ends its calls and MCP sessions
there (a broadcast among front doors, no answer)."""
FRONTDOOR_TOKENS_BUCKET: Final = "bastion_agent_tokens"
"""The JetStream KV bucket of agents' tokens (key: the token's SHA-256, hex; never the token)."""
FRONTDOOR_SESSIONS_BUCKET: Final = "bastion_mcp_sessions"
"""The JetStream KV bucket of session-based MCP sessions (key: the `Mcp-Session-Id`)."""
FRONTDOOR_SLOTS_BUCKET: Final = "bastion_mcp_session_slots"
"""The JetStream KV bucket of the MCP sessions each token keeps open (key: the token's
SHA-256, hex), counted against its cap by every front door replica."""
VAULT_ADD: Final = f"{PREFIX}.vault.add"
VAULT_LIST: Final = f"{PREFIX}.vault.list"
VAULT_REMOVE: Final = f"{PREFIX}.vault.remove"
VAULT_ROTATE: Final = f"{PREFIX}.vault.rotate"
"""Operator operations: a secret added, the names listed, one removed, the master key rotated."""
VAULT_KEYS_BUCKET: Final = "bastion_vault_keys"
"""The JetStream KV bucket of each tenant's data key, wrapped by the master key."""
VAULT_SECRETS_BUCKET: Final = "bastion_vault_secrets"
"""The JetStream KV bucket of secrets' ciphertexts (key: `<tenant>.<name>`)."""

SESSION_RUN: Final = f"{PREFIX}.session.run"
"""An agent run starts or ends: run-start and run-end hooks are asked, the audit told."""

EVENTS_ALL: Final = f"{PREFIX}.events.>"

AUDIT_ALL: Final = f"{PREFIX}.audit.>"
"""Every audit record: `bastion.v1.audit.<tenant>.<session>`, kept by `AUDIT_STREAM`."""
AUDIT_STREAM: Final = "bastion_audit"
"""The JetStream stream of the audit log (file storage; deletes and purges refused)."""
JOURNAL_BUCKET: Final = "bastion_journal"
"""The JetStream KV bucket of the journal (key: the call's canonical hash)."""
EGRESS_GRANTS_BUCKET: Final = "bastion_egress_grants"
"""The JetStream KV bucket of egress grants (key: grant id; the bucket's TTL expires them)."""
EGRESS_CONNECTIONS_BUCKET: Final = "bastion_egress_connections"
"""The JetStream KV bucket of each grant's connection log (key: grant id)."""
HOOKS_BUCKET: Final = "bastion_hooks"
"""The JetStream KV bucket where hook services register (key: the hook's name)."""
SESSIONS_BUCKET: Final = "bastion_sessions"
"""The JetStream KV bucket of the orchestrator's sessions (key: session id)."""
APPROVALS_BUCKET: Final = "bastion_approvals"
"""The JetStream KV bucket of parked calls waiting for a person (key: request id)."""
CALLS_BUCKET: Final = "bastion_calls"
"""The JetStream KV bucket of each call's outcome by call id (key: a hash of session and
call id): a call sent again with its call id gets that outcome, it never runs twice."""
TURNS_BUCKET: Final = "bastion_turns"
"""The JetStream KV bucket of session turns: which orchestrator runs a session's calls now,
until when (key: session id)."""
QUOTA_BUCKET: Final = "bastion_quota"
"""The JetStream KV bucket of each tenant's calls-per-second token bucket, shared by every
orchestrator replica (key: the tenant's name in hex)."""
SANDBOX_SLOTS_BUCKET: Final = "bastion_sandbox_slots"
"""The JetStream KV bucket of each tenant's running sandboxes, counted across every sandbox
replica, each slot leased until renewed (key: the tenant's name in hex)."""

SANDBOX_TASKS_BUCKET: Final = "bastion_sandbox_tasks"
"""The JetStream KV bucket of background tasks (key: the tenant's name in hex, the session
id, the task id), each state change a compare-and-set, and of each tenant's live tasks
(key: `live.` and the tenant's name in hex), counted across every sandbox replica."""


REPLY_INBOX_HEADER: Final = "Bastion-Reply-Inbox"
"""A request's header naming the caller's inbox: the service answers on
`reply_subject(<its user>, <inbox>)`, a subject the caller subscribes to and no response
window bounds, instead of the request's reply subject (docs/nats-permissions.md)."""


def reply_subject(responder: str, inbox: str) -> str:
    """Where `responder` (a NATS user, `*` for any) sends the answer to a request made from
    `inbox` (`_INBOX.<user>.<id>`), however long after the request it comes."""
    return f"{PREFIX}.reply.{responder}.{inbox}"


def session_call(session_id: str) -> str:
    """The subject a call of `session_id` is sent to."""
    return f"{PREFIX}.session.{session_id}.call"


def call_output(session_id: str, call_id: str) -> str:
    """Where the sandbox publishes a streamed call's output as its command writes it (a
    `shell` call sent with `stream`); only the front door may read it."""
    return f"{PREFIX}.calls.output.{session_id}.{call_id}"


def session_nested(session_id: str) -> str:
    """The subject a `run_code` program's call of one of `session_id`'s tools is sent to."""
    return f"{PREFIX}.session.{session_id}.nested"


def session_cancel(session_id: str) -> str:
    """The subject a cancel of one of `session_id`'s calls is sent to."""
    return f"{PREFIX}.session.{session_id}.cancel"


def mcp_elicit(session_id: str) -> str:
    """Where an upstream server's question during one of the session's calls is relayed."""
    return f"{PREFIX}.mcp.elicit.{session_id}"


def mcp_sample(session_id: str) -> str:
    """Where an upstream server's sampling request during one of the session's calls is
    relayed (only for a server the operator allowed to sample)."""
    return f"{PREFIX}.mcp.sample.{session_id}"


def event(kind: str, tenant: str) -> str:
    """The subject an event of `kind` (e.g. `call_finished`) for `tenant` is published on."""
    return f"{PREFIX}.events.{kind}.{tenant}"


def audit(tenant: str, session_id: str) -> str:
    """The subject of a session's audit records: `audit show` filters on it."""
    return f"{PREFIX}.audit.{tenant}.{session_id}"


def hook(event: str, tenant: str, name: str) -> str:
    """The subject hook `name` answers for `event` (e.g. `before_tool`) of `tenant`."""
    return f"{PREFIX}.hooks.{event}.{tenant}.{name}"


def sandbox_task_held(replica: str, verb: Literal["output", "stop", "release"]) -> str:
    """The subject sandbox replica `replica` alone serves `verb` of the tasks it runs on:
    `sandbox.tasks.<replica>.output|stop|release` (no other replica subscribes to it)."""
    return f"{PREFIX}.sandbox.tasks.{replica}.{verb}"
