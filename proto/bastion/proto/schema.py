"""The catalogue of wire messages and their JSON Schema, for clients in other languages."""

from __future__ import annotations

from typing import Any

import msgspec

from bastion.proto import (
    approvals,
    audit,
    egress,
    events,
    hooks,
    journal,
    mcp,
    policy,
    sandbox,
    session,
    stubs,
    tools,
    vault,
)
from bastion.proto.errors import ErrorReply

__all__ = ["MESSAGES", "json_schema"]

MESSAGES: dict[str, Any] = {
    "OpenSession": session.OpenSession,
    "SessionRef": session.SessionRef,
    "SessionInfo": session.SessionInfo,
    "ToolCall": tools.ToolCall,
    "CallResult": tools.CallResult,
    "PolicyRequest": policy.PolicyRequest,
    "PolicyDecision": policy.PolicyDecision,
    "PolicyStatusQuery": policy.PolicyStatusQuery,
    "PolicyStatus": policy.PolicyStatus,
    "RuleCheck": policy.RuleCheck,
    "RuleChecked": policy.RuleChecked,
    "ApprovalQuery": approvals.ApprovalQuery,
    "ApprovalList": approvals.ApprovalList,
    "ApprovalAnswer": approvals.ApprovalAnswer,
    "ApprovalAnswered": approvals.ApprovalAnswered,
    "ExecRequest": sandbox.ExecRequest,
    "ExecResult": sandbox.ExecResult,
    "FileRequest": sandbox.FileRequest,
    "FileResult": sandbox.FileResult,
    "CodeCheck": sandbox.CodeCheck,
    "CodeReport": sandbox.CodeReport,
    "SandboxCheck": sandbox.SandboxCheck,
    "SandboxReady": sandbox.SandboxReady,
    "SandboxRelease": sandbox.SandboxRelease,
    "SandboxReleased": sandbox.SandboxReleased,
    "ReadSkill": sandbox.ReadSkill,
    "RunSkill": sandbox.RunSkill,
    "WriteSkill": sandbox.WriteSkill,
    "SkillDocument": sandbox.SkillDocument,
    "FetchRequest": stubs.FetchRequest,
    "FetchedPage": egress.FetchedPage,
    "GrantRequest": egress.GrantRequest,
    "EgressGrant": egress.EgressGrant,
    "GrantRecord": egress.GrantRecord,
    "ConnectionsRequest": egress.ConnectionsRequest,
    "ConnectionLog": egress.ConnectionLog,
    "SearchRequest": egress.SearchRequest,
    "SearchHit": egress.SearchHit,
    "SearchResults": egress.SearchResults,
    "AddServer": mcp.AddServer,
    "ReviewServer": mcp.ReviewServer,
    "McpReview": mcp.McpReview,
    "ListServers": mcp.ListServers,
    "ServerList": mcp.ServerList,
    "RemoveServer": mcp.RemoveServer,
    "ServerRemoved": mcp.ServerRemoved,
    "BrowseServer": mcp.BrowseServer,
    "BrowseText": mcp.BrowseText,
    "OfferTools": mcp.OfferTools,
    "ToolOffer": mcp.ToolOffer,
    "McpCall": mcp.McpCall,
    "McpCallResult": mcp.McpCallResult,
    "ElicitQuestion": mcp.ElicitQuestion,
    "ElicitAnswer": mcp.ElicitAnswer,
    "McpServerRecord": mcp.McpServerRecord,
    "LeaseRequest": vault.LeaseRequest,
    "Lease": vault.Lease,
    "VaultKeyQuery": vault.VaultKeyQuery,
    "VaultKey": vault.VaultKey,
    "AddSecret": vault.AddSecret,
    "SecretAdded": vault.SecretAdded,
    "ListSecrets": vault.ListSecrets,
    "SecretList": vault.SecretList,
    "RemoveSecret": vault.RemoveSecret,
    "SecretRemoved": vault.SecretRemoved,
    "RotateKey": vault.RotateKey,
    "KeyRotated": vault.KeyRotated,
    "LeasedValues": vault.LeasedValues,
    "WrappedKey": vault.WrappedKey,
    "StoredSecret": vault.StoredSecret,
    "Event": events.Event,
    "ErrorReply": ErrorReply,
    "AuditRecord": audit.AuditRecord,
    "JournalEntry": journal.JournalEntry,
    "HookRegistration": hooks.HookRegistration,
    "HookEvent": hooks.HookEvent,
    "HookAnswer": hooks.HookAnswer,
    "RunMark": hooks.RunMark,
    "RunMarked": hooks.RunMarked,
}
"""Every message (or union of messages) a subject carries, by the name its schema file takes."""


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of one entry of `MESSAGES`."""
    return msgspec.json.schema(MESSAGES[name])
