"""Every wire message round-trips, exports a JSON Schema, and keeps its tag; ingress is strict."""

from __future__ import annotations

import inspect
import re
import types
from datetime import UTC, datetime
from typing import Any, Union, get_args, get_origin

import jsonschema
import msgspec
import pytest

import bastion.proto
from bastion.proto import (
    approvals,
    audit,
    cancel,
    egress,
    events,
    frontdoor,
    hooks,
    journal,
    mcp,
    policy,
    sandbox,
    session,
    stubs,
    toolinput,
    tools,
    vault,
)
from bastion.proto._base import Ingress, Message
from bastion.proto.errors import ErrorReply
from bastion.proto.schema import MESSAGES, json_schema

AT = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
SID = "0123456789abcdef"

DECISION = policy.PolicyDecision(
    outcome="ask",
    reason="writes ask at L2",
    rule="level.L2.write",
    approved_by="skill notes: Write(notes/*)",
    asked_because_tainted=True,
)

SPEC = mcp.McpServerSpec(
    transport="stdio",
    command=("python3", "notes.py"),
    directory="/srv/notes",
    env=("NOTES_TOKEN",),
    sandbox="bwrap",
    sandbox_network="declared",
    url="https://mcp.example.com/mcp",
    headers=("Authorization: Bearer ${NOTES_TOKEN}",),
    public_key_pem="-----BEGIN PUBLIC KEY-----",
    timeout_s=30.0,
    effects=(mcp.EffectOverride(tool="add_note", effect="spend"),),
    sampling=mcp.SamplingAllowance(),
    read_only_dirs=("/opt/venv",),
)

PIN = mcp.ToolPin(
    name="add_note",
    digest="cd" * 32,
    description="Keep a note.",
    effect="write",
    idempotent=True,
    open_world=False,
)

REVIEWED = mcp.ReviewedTool(
    name="add_note",
    effect="write",
    description="Keep a note.",
    status="changed",
    repeats_run_again=True,
    flags=("its description has invisible Unicode",),
)

OFFERED = mcp.OfferedTool(
    name="notes_add_note",
    server="notes",
    upstream="add_note",
    upstream_kind="tool",
    description="Keep a note.",
    effect="write",
    input_schema_json='{"type":"object"}',
    digest="cd" * 32,
    journaled=True,
    taints=True,
    call_timeout_s=30.0,
)

TOKEN_INFO = frontdoor.TokenInfo(
    token_id="0123456789abcdef",
    agent="claude",
    tenant="acme",
    autonomy="L3",
    workspace="/w",
    shell=True,
    mcp=("notes",),
    created_at=AT,
)
PARKED = approvals.ParkedCall(
    request_id="fedcba9876543210",
    session_id=SID,
    tenant="acme",
    agent="tester",
    call_id="c1",
    tool="write_file",
    input={"path": "README.md", "content": "x"},
    decision=DECISION,
    created_at=AT,
    state="declined",
    answered_by="cli:alice",
    answered_at=AT,
    answer="leave it",
    rule="write_file(README.md)",
    result=ErrorReply(code="declined", message="a person (cli:alice) declined this call"),
    runner="0a0b0c0d",
)
SKILL_ENTRY = sandbox.SkillEntry(
    name="pypi-version",
    description="The latest version of a package.",
    allowed_tools=("Read",),
    network=("pypi.org",),
    secrets=("PYPI_TOKEN",),
    timeout_s=30.0,
    scripts=("scripts/latest.py",),
    more_scripts=True,
    excerpt="Run scripts/latest.py with the package's name.",
    problem="its SKILL.md is a link leading out of the skills dir: it is not read",
)

SAMPLES: dict[type[msgspec.Struct], msgspec.Struct] = {
    session.OpenSession: session.OpenSession(
        agent="tester",
        tenant="acme",
        autonomy="L4",
        workspace="/tmp/ws",
        shell=True,
        sandbox="docker:alpine@sha256:" + "a" * 64,
        network="declared",
        skill_approvals=False,
        ask=False,
        web=True,
        mcp=("notes",),
    ),
    session.SessionRef: session.SessionRef(session_id=SID),
    session.OpeningChecked: session.OpeningChecked(),
    session.ToolSpec: session.ToolSpec(
        name="notes_add_note",
        effect="write",
        description="Keep a note",
        input_schema_json='{"type":"object"}',
        server="notes",
        upstream="add_note",
        upstream_kind="tool",
        digest="cd" * 32,
        journaled=True,
        taints=True,
        call_timeout_s=30.0,
    ),
    session.SessionInfo: session.SessionInfo(
        session_id=SID,
        tenant="acme",
        agent="tester",
        autonomy="L2",
        workspace="/tmp/ws",
        shell=True,
        sandbox="bwrap",
        network="none",
        state="closed",
        opened_at=AT,
        closed_at=AT,
        calls=3,
        tools=(session.ToolSpec(name="read_file", effect="read", description="Read a file"),),
        tainted_until=AT,
        pre_approvals=(policy.PreApproval(rule="Write(notes/*)", source="skill notes"),),
        skill_approvals=False,
        ask=False,
        waiting_for="fedcba9876543210",
        notices=("MCP server notes: add_note changed since it was reviewed",),
        mcp=("notes",),
    ),
    tools.ToolCall: tools.ToolCall(
        tool="shell", input={"command": "ls -la", "nested": {"n": [1, 2.5, None]}}, call_id="c1"
    ),
    tools.NestedCall: tools.NestedCall(
        parent_call_id="c1", tool="read_file", input={"path": "a.txt", "limit": 5}
    ),
    tools.NestedResult: tools.NestedResult(call_id="c1.1", text="1\thello"),
    tools.ToolOutput: tools.ToolOutput(
        call_id="c1", tool="shell", effect="write", text="ok", decision=DECISION, duration_s=0.25
    ),
    tools.CallParked: tools.CallParked(
        call_id="c2",
        tool="write_file",
        session_id=SID,
        request_id="0123456789abcdef",
        input={"path": "README.md", "content": "x"},
        decision=DECISION,
        message="write_file waits for a person's approval",
    ),
    ErrorReply: ErrorReply(code="denied", message="the policy refused the call"),
    policy.PolicyRequest: policy.PolicyRequest(
        session_id=SID,
        tenant="acme",
        agent="tester",
        autonomy="L3",
        tool="shell",
        effect="external",
        tainted=True,
        input_summary="curl example.com",
        target="curl example.com",
        pre_approvals=(policy.PreApproval(rule="Bash(curl:*)", source="skill fetcher"),),
        skill="fetcher",
        skill_approvals=False,
    ),
    policy.PreApproval: policy.PreApproval(rule="Write(notes/*)", source="always (person)"),
    policy.PolicyDecision: DECISION,
    policy.PolicyStatusQuery: policy.PolicyStatusQuery(),
    policy.PolicyStatus: policy.PolicyStatus(
        policy_dir="/var/lib/bastion/policies",
        files=("paths.cedar",),
        policies=2,
        loaded_at=AT,
        generation=3,
        error="paths.cedar: policy 0 does not validate",
    ),
    policy.RuleCheck: policy.RuleCheck(tool="shell", target="git log -1", rule="Bash(git:*)"),
    policy.RuleChecked: policy.RuleChecked(rule="Bash(git:*)", problem="not a rule"),
    policy.PathsCheck: policy.PathsCheck(
        call=policy.PolicyRequest(
            session_id="0123456789abcdef",
            tenant="default",
            agent="coder",
            autonomy="L3",
            tool="search_files",
            effect="read",
        ),
        paths=("notes/todo.txt", "secrets/deploy.txt"),
    ),
    policy.PathsChecked: policy.PathsChecked(hidden=("secrets/deploy.txt",)),
    approvals.ParkedCall: PARKED,
    approvals.ApprovalQuery: approvals.ApprovalQuery(
        session_id=SID, tenant="acme", every_state=True
    ),
    approvals.ApprovalList: approvals.ApprovalList(approvals=(PARKED,)),
    approvals.ApprovalAnswer: approvals.ApprovalAnswer(
        request_id="fedcba9876543210",
        approve=True,
        by="cli:alice",
        always=True,
        rule="Write(notes/*)",
        reason="fine",
    ),
    cancel.CancelCall: cancel.CancelCall(call_id="c-1", by="mcp:claude"),
    cancel.CallCancel: cancel.CallCancel(session_id=SID, call_id="c-1", by="http:ops"),
    cancel.CancelAnswer: cancel.CancelAnswer(
        session_id=SID, call_id="c-1", outcome="cancelled", message="call 'c-1' was cancelled"
    ),
    approvals.ApprovalAnswered: approvals.ApprovalAnswered(
        approval=PARKED, result=ErrorReply(code="declined", message="no")
    ),
    sandbox.ReadSkill: sandbox.ReadSkill(
        session_id=SID, skills_dir="/srv/skills", name="release-notes"
    ),
    sandbox.RunSkill: sandbox.RunSkill(
        skills_dir="/srv/skills",
        name="word-count",
        script="scripts/count.py",
        args=("a b", "$(x)"),
        exec=sandbox.ExecRequest(
            session_id=SID,
            workspace="/w",
            command="/skill/scripts/count.py",
            network="declared",
            declared_hosts=("pypi.org", "*.github.com", "api.x.io:443"),
            secrets=("PYPI_TOKEN",),
            call_id="c1",
        ),
    ),
    sandbox.WriteSkill: sandbox.WriteSkill(
        session_id=SID,
        skills_dir="/srv/skills",
        name="notes",
        description="Notes.",
        instructions="---\nallowed-tools: Bash\n---\nWrite notes.",
    ),
    sandbox.SkillDocument: sandbox.SkillDocument(
        name="release-notes",
        text="---\nname: release-notes\n---\n",
        description="Notes",
        allowed_tools=("Write(notes/*)",),
    ),
    sandbox.FindSkills: sandbox.FindSkills(
        session_id=SID, skills_dir="/srv/skills", query="release notes"
    ),
    sandbox.SkillEntry: SKILL_ENTRY,
    sandbox.SkillListing: sandbox.SkillListing(skills=(SKILL_ENTRY,), total=3, unread=True),
    sandbox.Limits: sandbox.Limits(wall_s=1.5, cpu_s=2, output_bytes=2048),
    session.SessionLimits: session.SessionLimits(wall_s=5.0, processes=64),
    sandbox.RunCode: sandbox.RunCode(
        session_id=SID,
        workspace="/tmp/ws",
        call_id="c1",
        code="print(1)",
        backend="docker:img@sha256:" + "0" * 64,
        limits=sandbox.Limits(wall_s=3.0),
        tenant="acme",
    ),
    sandbox.ExecRequest: sandbox.ExecRequest(
        session_id=SID,
        workspace="/tmp/ws",
        command="echo hi",
        network="declared",
        limits=sandbox.Limits(wall_s=3.0),
    ),
    sandbox.OutputChunk: sandbox.OutputChunk(seq=2, stdout="line\n", stderr="", more=10),
    sandbox.ExecResult: sandbox.ExecResult(
        exit_status=-9,
        ended="signal",
        signal=9,
        stdout="out",
        stderr="err",
        stdout_cut=10,
        stderr_cut=0,
        duration_s=1.0,
    ),
    sandbox.ReadFile: sandbox.ReadFile(
        session_id=SID,
        workspace="/tmp/ws",
        input=toolinput.ReadFileInput(path="a.txt", offset=3, limit=10),
    ),
    sandbox.WriteFile: sandbox.WriteFile(
        session_id=SID,
        workspace="/tmp/ws",
        input=toolinput.WriteFileInput(path="d/a.txt", content="héllo\n"),
    ),
    sandbox.EditFile: sandbox.EditFile(
        session_id=SID,
        workspace="/tmp/ws",
        input=toolinput.EditFileInput(
            path="a.py", old_string="x = 1", new_string="x = 2", replace_all=True
        ),
    ),
    sandbox.ApplyPatch: sandbox.ApplyPatch(
        session_id=SID,
        workspace="/tmp/ws",
        input=toolinput.ApplyPatchInput(patch="--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n"),
    ),
    sandbox.ListFiles: sandbox.ListFiles(
        session_id=SID, workspace="/tmp/ws", input=toolinput.ListFilesInput(path="src")
    ),
    sandbox.ResolvePaths: sandbox.ResolvePaths(
        session_id=SID, workspace="/tmp/ws", paths=("notes/a.md",), patch=""
    ),
    sandbox.ResolvedPaths: sandbox.ResolvedPaths(paths=("notes/a.md", "secrets/key")),
    sandbox.FindFiles: sandbox.FindFiles(
        session_id=SID,
        workspace="/tmp/ws",
        input=toolinput.FindFilesInput(pattern="**/*.rs", path="src"),
    ),
    sandbox.SearchFiles: sandbox.SearchFiles(
        session_id=SID,
        workspace="/tmp/ws",
        input=toolinput.SearchFilesInput(
            pattern="TODO", path="src", glob="*.py", context=4, case_insensitive=True
        ),
    ),
    sandbox.CodeCheck: sandbox.CodeCheck(
        session_id=SID,
        workspace="/tmp/ws",
        what="tests",
        backend="docker:alpine@sha256:" + "a" * 64,
        network="declared",
        limits=sandbox.Limits(wall_s=3.0),
    ),
    sandbox.CodeReport: sandbox.CodeReport(program="pytest", text="1 passed, 0 failed"),
    sandbox.FileResult: sandbox.FileResult(text="1\thello"),
    sandbox.SandboxCheck: sandbox.SandboxCheck(workspace="/tmp/ws", backend="bwrap"),
    sandbox.SandboxReady: sandbox.SandboxReady(backend="bwrap", detail="bubblewrap 0.11"),
    sandbox.SandboxRelease: sandbox.SandboxRelease(session_id="0123456789abcdef"),
    sandbox.SandboxReleased: sandbox.SandboxReleased(containers=1),
    stubs.FetchRequest: stubs.FetchRequest(session_id=SID, url="https://docs.rs", format="text"),
    egress.GrantRequest: egress.GrantRequest(
        session_id=SID,
        tenant="acme",
        hosts=("pypi.org", "*.example.org:8443"),
        ttl_s=60,
        cut_salt=b"s" * 16,
        cuts=(egress.FormDigest(name="API_TOKEN", length=16, digest=b"d" * 16),),
    ),
    egress.FormDigest: egress.FormDigest(name="API_TOKEN", length=16, digest=b"d" * 16),
    egress.EgressGrant: egress.EgressGrant(
        grant_id="0" * 32, secret="s" * 43, expires_at=AT, proxy="127.0.0.1:3128"
    ),
    egress.GrantRecord: egress.GrantRecord(
        grant_id="0" * 32,
        secret_sha256="a" * 64,
        session_id=SID,
        tenant="acme",
        hosts=("pypi.org",),
        any_public_host=False,
        expires_at=AT,
    ),
    egress.ConnectionsRequest: egress.ConnectionsRequest(grant_id="0" * 32),
    egress.ConnectionLog: egress.ConnectionLog(
        grant_id="0" * 32, lines=("pypi.org:443 allowed", "example.com:443 refused: x")
    ),
    egress.FetchedPage: egress.FetchedPage(
        url="https://docs.rs/", status=200, content_type="text/html", text="# Docs", cut=3
    ),
    egress.SearchRequest: egress.SearchRequest(
        session_id=SID, tenant="acme", query="msgspec tags", count=3, freshness="week"
    ),
    egress.SearchHit: egress.SearchHit(
        title="msgspec", url="https://jcristharif.com/", snippet="x"
    ),
    egress.SearchResults: egress.SearchResults(
        provider="searxng", hits=(egress.SearchHit(title="t", url="https://a.example/"),)
    ),
    mcp.EffectOverride: mcp.EffectOverride(tool="add_note", effect="spend"),
    mcp.SamplingAllowance: mcp.SamplingAllowance(max_tokens=500, per_session=2),
    mcp.McpServerSpec: SPEC,
    mcp.ToolPin: PIN,
    mcp.McpServerRecord: mcp.McpServerRecord(
        tenant="acme",
        name="notes",
        spec=SPEC,
        added_at=AT,
        reviewed_at=AT,
        server_name="notes",
        server_version="1.0",
        protocol="2026-07-28",
        key_fingerprint="ab" * 32,
        pins=(PIN,),
    ),
    mcp.ReviewedTool: REVIEWED,
    mcp.McpReview: mcp.McpReview(
        server="notes",
        server_name="notes",
        server_version="1.0",
        protocol="2025-11-25",
        runs="python3 notes.py, in bwrap with no network",
        tools=(REVIEWED,),
        pinned=True,
    ),
    mcp.AddServer: mcp.AddServer(tenant="acme", name="notes", spec=SPEC),
    mcp.ReviewServer: mcp.ReviewServer(tenant="acme", name="notes", accept=True),
    mcp.ListServers: mcp.ListServers(tenant="acme"),
    mcp.ServerSummary: mcp.ServerSummary(name="notes", runs="python3 notes.py", pins=(PIN,)),
    mcp.ServerList: mcp.ServerList(
        tenant="acme",
        servers=(mcp.ServerSummary(name="notes", runs="python3 notes.py", pins=(PIN,)),),
    ),
    mcp.RemoveServer: mcp.RemoveServer(tenant="acme", name="notes"),
    mcp.ServerRemoved: mcp.ServerRemoved(name="notes"),
    mcp.OfferedTool: OFFERED,
    mcp.OfferTools: mcp.OfferTools(tenant="acme", session_id=SID, servers=("notes",)),
    mcp.ToolOffer: mcp.ToolOffer(
        tools=(OFFERED,),
        notices=("MCP server notes: export_notes is new and was not reviewed",),
    ),
    mcp.McpCall: mcp.McpCall(
        tenant="acme",
        session_id=SID,
        call_id="c1",
        server="notes",
        upstream_kind="tool",
        tool="add_note",
        digest="cd" * 32,
        arguments={"name": "release", "n": 3},
        can_ask=True,
    ),
    mcp.McpCallResult: mcp.McpCallResult(text="kept note release", is_error=True),
    mcp.McpPrefetch: mcp.McpPrefetch(tenant="acme", session_id=SID, call_id="c1", server="notes"),
    mcp.BrowseServer: mcp.BrowseServer(tenant="acme", name="notes", what="read", uri="notes://a"),
    mcp.BrowseText: mcp.BrowseText(text="notes://a"),
    mcp.ElicitQuestion: mcp.ElicitQuestion(
        session_id=SID,
        server="notes",
        message="Which folder?",
        schema_json='{"type":"object"}',
        url="https://a.example/",
    ),
    mcp.ElicitAnswer: mcp.ElicitAnswer(action="accept", content={"folder": "x"}),
    mcp.SampleQuestion: mcp.SampleQuestion(
        session_id=SID, server="notes", request_json='{"maxTokens":5,"messages":[]}'
    ),
    mcp.SampleAnswer: mcp.SampleAnswer(result_json='{"role":"assistant"}', refused="no"),
    frontdoor.CreateToken: frontdoor.CreateToken(
        agent="claude",
        tenant="acme",
        autonomy="L3",
        workspace="/w",
        shell=True,
        network="declared",
        read_only_dirs=("/data",),
        skills_dir="/skills",
        limits=session.SessionLimits(wall_s=5.0),
        ask=False,
        mcp=("notes",),
    ),
    frontdoor.TokenInfo: TOKEN_INFO,
    frontdoor.TokenCreated: frontdoor.TokenCreated(token="bst_abc", info=TOKEN_INFO),
    frontdoor.ListTokens: frontdoor.ListTokens(tenant="acme"),
    frontdoor.TokenList: frontdoor.TokenList(tokens=(TOKEN_INFO,)),
    frontdoor.RevokeToken: frontdoor.RevokeToken(token_id="0123456789abcdef"),
    frontdoor.TokenRevoked: frontdoor.TokenRevoked(
        token_id="0123456789abcdef", agent="claude", tenant="acme"
    ),
    frontdoor.TokenWithdrawn: frontdoor.TokenWithdrawn(token_hash="ab" * 32),
    frontdoor.McpSessionRecord: frontdoor.McpSessionRecord(
        mcp_session_id="9f" * 16,
        token_hash="ab" * 32,
        protocol_version="2025-11-25",
        client_params_json='{"capabilities":{}}',
        created_at=AT,
        bastion_session_id=SID,
        owner="door-1",
    ),
    frontdoor.McpSessionSlots: frontdoor.McpSessionSlots(held={"9f" * 16: AT}),
    stubs.LeaseRequest: stubs.LeaseRequest(
        session_id=SID, tenant="acme", call_id="c1", names=("API_TOKEN",)
    ),
    vault.VaultKeyQuery: vault.VaultKeyQuery(),
    vault.VaultKey: vault.VaultKey(public_key=b"k" * 32),
    vault.AddSecret: vault.AddSecret(tenant="acme", name="API_TOKEN", sealed_value=b"sealed"),
    vault.SecretAdded: vault.SecretAdded(name="API_TOKEN", size=40),
    vault.ListSecrets: vault.ListSecrets(tenant="acme"),
    vault.SecretInfo: vault.SecretInfo(name="API_TOKEN", added_at=AT),
    vault.SecretList: vault.SecretList(
        tenant="acme", secrets=(vault.SecretInfo(name="API_TOKEN", added_at=AT),)
    ),
    vault.RemoveSecret: vault.RemoveSecret(tenant="acme", name="API_TOKEN"),
    vault.SecretRemoved: vault.SecretRemoved(name="API_TOKEN"),
    vault.RotateKey: vault.RotateKey(sealed_key=b"sealed"),
    vault.KeyRotated: vault.KeyRotated(tenants=2, key_id="0123456789abcdef"),
    vault.Lease: vault.Lease(names=("API_TOKEN",), sealed=b"sealed"),
    vault.LeasedValues: vault.LeasedValues(values=(("API_TOKEN", "not-a-real-token"),)),
    vault.RedactionRequest: vault.RedactionRequest(
        session_id=SID, tenant="acme", public_key=b"k" * 32
    ),
    vault.RedactionValues: vault.RedactionValues(names=("API_TOKEN",), sealed=b"sealed"),
    vault.WrappedKey: vault.WrappedKey(
        key_id="0123456789abcdef", nonce=b"n" * 12, wrapped=b"w" * 48, created_at=AT
    ),
    vault.StoredSecret: vault.StoredSecret(added_at=AT, nonce=b"n" * 12, ciphertext=b"c" * 40),
    events.SessionOpened: events.SessionOpened(
        session_id=SID, tenant="acme", agent="tester", autonomy="L2", at=AT
    ),
    events.CallDecided: events.CallDecided(
        session_id=SID, tenant="acme", call_id="c1", tool="shell", outcome="deny", rule="r", at=AT
    ),
    events.CallFinished: events.CallFinished(
        session_id=SID,
        tenant="acme",
        call_id="c1",
        tool="shell",
        error_code="",
        duration_s=0.5,
        at=AT,
    ),
    events.SessionClosed: events.SessionClosed(session_id=SID, tenant="acme", calls=2, at=AT),
    events.TaskEnded: events.TaskEnded(
        session_id=SID,
        tenant="acme",
        task_id="01JD5X0000000000000000TASK",
        label="dev server",
        status="failed",
        exit_code=3,
        error="exit_status",
        at=AT,
    ),
    audit.AuditRecord: audit.AuditRecord(
        action="result",
        session_id=SID,
        tenant="acme",
        at=AT,
        tool="write_file",
        call_id="c1",
        outcome="ok",
        rule="level.L3.write",
        summary='{"content":"<5 bytes>","path":"a.txt"}',
        by="hook guard",
        parent_call_id="c0",
    ),
    journal.JournalEntry: journal.JournalEntry(
        session_id=SID,
        tool="write_file",
        call_id="c1",
        state="done",
        started_at=AT,
        finished_at=AT,
        text="wrote 5 bytes to a.txt",
        decision=DECISION,
        why="no answer within 10 s",
    ),
    journal.CallRecord: journal.CallRecord(
        session_id=SID,
        call_id="c1",
        tool="shell",
        state="done",
        started_at=AT,
        holder="host:0a1b2c3d",
        effect="write",
        decision=DECISION,
        error=ErrorReply(code="uncertain", message="no answer: it is not made again"),
    ),
    hooks.HookRegistration: hooks.HookRegistration(
        name="guard",
        events=("before_tool", "after_tool"),
        tools=("shell", "github_*"),
        tenants=("acme",),
        timeout_s=2.5,
    ),
    hooks.HookEvent: hooks.HookEvent(
        event="after_tool",
        session_id=SID,
        tenant="acme",
        agent="tester",
        workspace="/tmp/ws",
        tool="shell",
        input={"command": "ls"},
        outcome="allow",
        text="exit status 0",
        ended="done",
    ),
    hooks.HookAnswer: hooks.HookAnswer(block=True, reason="no shell today", text="noted"),
    hooks.RunMark: hooks.RunMark(session_id=SID, event="run_end", task="fix it", ended="done"),
    hooks.RunMarked: hooks.RunMarked(notes=("[hook guard] remember the tests",)),
}
"""One representative instance of every struct, with every optional field set off default."""

TAGS: dict[type[msgspec.Struct], str] = {
    session.OpenSession: "session.open",
    session.SessionRef: "session.ref",
    session.OpeningChecked: "session.opening_checked",
    session.ToolSpec: "tool.spec",
    session.SessionInfo: "session.info",
    tools.ToolCall: "tool.call",
    tools.ToolOutput: "tool.output",
    tools.CallParked: "tool.parked",
    ErrorReply: "error",
    policy.PolicyRequest: "policy.request",
    policy.PolicyDecision: "policy.decision",
    policy.PreApproval: "policy.preapproval",
    policy.PolicyStatusQuery: "policy.status_query",
    policy.PolicyStatus: "policy.status",
    policy.RuleCheck: "policy.rule_check",
    policy.RuleChecked: "policy.rule_checked",
    policy.PathsCheck: "policy.check_paths",
    policy.PathsChecked: "policy.paths_checked",
    approvals.ParkedCall: "approval.parked",
    approvals.ApprovalQuery: "approval.query",
    approvals.ApprovalList: "approval.list",
    approvals.ApprovalAnswer: "approval.answer",
    approvals.ApprovalAnswered: "approval.answered",
    cancel.CancelCall: "call.cancel",
    cancel.CallCancel: "call.cancel.told",
    cancel.CancelAnswer: "call.cancel.answer",
    sandbox.ReadSkill: "sandbox.skill_read",
    sandbox.SkillDocument: "sandbox.skill_document",
    sandbox.RunSkill: "sandbox.skill_run",
    sandbox.RunCode: "sandbox.run_code",
    tools.NestedCall: "tool.nested_call",
    tools.NestedResult: "tool.nested_result",
    sandbox.FindSkills: "sandbox.skill_find",
    sandbox.SkillEntry: "sandbox.skill_entry",
    sandbox.SkillListing: "sandbox.skill_listing",
    sandbox.WriteSkill: "sandbox.skill_write",
    sandbox.Limits: "Limits",
    session.SessionLimits: "SessionLimits",
    sandbox.ExecRequest: "sandbox.exec",
    sandbox.ExecResult: "sandbox.exec_result",
    sandbox.OutputChunk: "sandbox.output",
    sandbox.ReadFile: "file.read",
    sandbox.WriteFile: "file.write",
    sandbox.EditFile: "file.edit",
    sandbox.ApplyPatch: "file.patch",
    sandbox.ListFiles: "file.list",
    sandbox.ResolvePaths: "file.resolve",
    sandbox.ResolvedPaths: "file.resolved",
    sandbox.FindFiles: "file.find",
    sandbox.SearchFiles: "file.search",
    sandbox.CodeCheck: "sandbox.check_code",
    sandbox.CodeReport: "sandbox.code_report",
    sandbox.FileResult: "file.result",
    sandbox.SandboxCheck: "sandbox.check",
    sandbox.SandboxReady: "sandbox.ready",
    sandbox.SandboxRelease: "sandbox.release",
    sandbox.SandboxReleased: "sandbox.released",
    stubs.FetchRequest: "egress.fetch",
    egress.GrantRequest: "egress.grant_request",
    egress.EgressGrant: "egress.grant",
    egress.GrantRecord: "egress.grant_record",
    egress.FormDigest: "egress.form_digest",
    egress.ConnectionsRequest: "egress.connections_request",
    egress.ConnectionLog: "egress.connection_log",
    egress.FetchedPage: "egress.fetched_page",
    egress.SearchRequest: "egress.search",
    egress.SearchHit: "egress.search_hit",
    egress.SearchResults: "egress.search_results",
    mcp.EffectOverride: "mcp.effect_override",
    mcp.SamplingAllowance: "mcp.sampling",
    mcp.McpServerSpec: "mcp.server_spec",
    mcp.ToolPin: "mcp.tool_pin",
    mcp.McpServerRecord: "mcp.server_record",
    mcp.ReviewedTool: "mcp.reviewed_tool",
    mcp.McpReview: "mcp.review",
    mcp.AddServer: "mcp.add",
    mcp.ReviewServer: "mcp.review_request",
    mcp.ListServers: "mcp.list",
    mcp.ServerSummary: "mcp.server_summary",
    mcp.ServerList: "mcp.server_list",
    mcp.RemoveServer: "mcp.remove",
    mcp.ServerRemoved: "mcp.removed",
    mcp.OfferedTool: "mcp.offered_tool",
    mcp.OfferTools: "mcp.offer",
    mcp.ToolOffer: "mcp.tool_offer",
    mcp.McpCall: "mcp.call",
    mcp.McpPrefetch: "mcp.prefetch",
    mcp.McpCallResult: "mcp.call_result",
    mcp.BrowseServer: "mcp.browse",
    mcp.BrowseText: "mcp.browse_text",
    mcp.ElicitQuestion: "mcp.elicit",
    mcp.ElicitAnswer: "mcp.elicit_answer",
    mcp.SampleQuestion: "mcp.sample",
    mcp.SampleAnswer: "mcp.sample_answer",
    frontdoor.CreateToken: "frontdoor.token_create",
    frontdoor.TokenInfo: "frontdoor.token_info",
    frontdoor.TokenCreated: "frontdoor.token_created",
    frontdoor.ListTokens: "frontdoor.token_list_query",
    frontdoor.TokenList: "frontdoor.token_list",
    frontdoor.RevokeToken: "frontdoor.token_revoke",
    frontdoor.TokenRevoked: "frontdoor.token_revoked",
    frontdoor.TokenWithdrawn: "frontdoor.token_withdrawn",
    frontdoor.McpSessionRecord: "frontdoor.mcp_session",
    frontdoor.McpSessionSlots: "frontdoor.mcp_session_slots",
    stubs.LeaseRequest: "vault.lease",
    vault.VaultKeyQuery: "vault.key_query",
    vault.VaultKey: "vault.key",
    vault.AddSecret: "vault.add",
    vault.SecretAdded: "vault.added",
    vault.ListSecrets: "vault.list",
    vault.SecretInfo: "vault.secret_info",
    vault.SecretList: "vault.secret_list",
    vault.RemoveSecret: "vault.remove",
    vault.SecretRemoved: "vault.removed",
    vault.RotateKey: "vault.rotate",
    vault.KeyRotated: "vault.rotated",
    vault.Lease: "vault.leased",
    vault.LeasedValues: "vault.values",
    vault.RedactionRequest: "vault.redaction_request",
    vault.RedactionValues: "vault.redaction_values",
    vault.WrappedKey: "vault.wrapped_key",
    vault.StoredSecret: "vault.stored_secret",
    events.SessionOpened: "event.session_opened",
    events.CallDecided: "event.call_decided",
    events.CallFinished: "event.call_finished",
    events.SessionClosed: "event.session_closed",
    events.TaskEnded: "event.task_ended",
    audit.AuditRecord: "audit.record",
    journal.JournalEntry: "journal.entry",
    journal.CallRecord: "call.record",
    hooks.HookRegistration: "hooks.registration",
    hooks.HookEvent: "hooks.event",
    hooks.HookAnswer: "hooks.answer",
    hooks.RunMark: "session.run_mark",
    hooks.RunMarked: "session.run_marked",
}
"""The tag each struct travels with. A tag never changes: renaming a class must not move it."""


def wire_structs() -> set[type[msgspec.Struct]]:
    """Every struct the proto package defines."""
    found: set[type[msgspec.Struct]] = set()
    modules = (
        approvals,
        audit,
        cancel,
        egress,
        events,
        frontdoor,
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
    for module in (*modules, bastion.proto.errors):
        for name, value in inspect.getmembers(module, inspect.isclass):
            defined_here = value.__module__ == module.__name__ and not name.startswith("_")
            if issubclass(value, Message) and value not in (Message, Ingress) and defined_here:
                found.add(value)
    return found


def members(message_type: Any) -> tuple[type[msgspec.Struct], ...]:
    """The structs a catalogue entry may carry: itself, or each member of a union."""
    if get_origin(message_type) in (Union, types.UnionType):
        return get_args(message_type)
    return (message_type,)


CATALOGUE = [(name, struct) for name, entry in MESSAGES.items() for struct in members(entry)]


def test_every_struct_of_the_wire_has_a_sample_and_a_pinned_tag() -> None:
    assert wire_structs() == set(SAMPLES) == set(TAGS)


def test_every_struct_of_the_wire_is_in_the_schema_catalogue_or_nested_in_one() -> None:
    listed = {struct for _, struct in CATALOGUE}
    nested_only = wire_structs() - listed
    assert nested_only == {
        session.ToolSpec,
        session.SessionLimits,
        sandbox.Limits,
        sandbox.SkillEntry,
        policy.PreApproval,
        approvals.ParkedCall,
        vault.SecretInfo,
        egress.FormDigest,
        mcp.EffectOverride,
        mcp.SamplingAllowance,
        mcp.McpServerSpec,
        mcp.ToolPin,
        mcp.ReviewedTool,
        mcp.ServerSummary,
        mcp.OfferedTool,
    }


@pytest.mark.parametrize("struct", sorted(TAGS, key=lambda s: s.__name__), ids=lambda s: s.__name__)
def test_a_struct_keeps_its_tag_and_tag_field(struct: type[msgspec.Struct]) -> None:
    config = struct.__struct_config__
    assert (config.tag_field, config.tag) == ("kind", TAGS[struct])
    assert config.frozen
    assert msgspec.to_builtins(SAMPLES[struct])["kind"] == TAGS[struct]


@pytest.mark.parametrize(("name", "struct"), CATALOGUE, ids=lambda v: getattr(v, "__name__", v))
def test_a_message_round_trips_through_msgpack_and_json_as_its_catalogue_entry(
    name: str, struct: type[msgspec.Struct]
) -> None:
    sample = SAMPLES[struct]
    entry = MESSAGES[name]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(sample), type=entry) == sample
    assert msgspec.json.decode(msgspec.json.encode(sample), type=entry) == sample


@pytest.mark.parametrize(
    "struct", sorted(SAMPLES, key=lambda s: s.__name__), ids=lambda s: s.__name__
)
def test_a_message_built_with_defaults_round_trips(struct: type[msgspec.Struct]) -> None:
    required = {
        field.name: getattr(SAMPLES[struct], field.name)
        for field in msgspec.structs.fields(struct)
        if field.required
    }
    minimal = struct(**required)
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(minimal), type=struct) == minimal


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_the_json_schema_of_a_catalogue_entry_is_a_schema_its_json_instances_satisfy(
    name: str,
) -> None:
    schema = json_schema(name)
    definitions = schema.get("$defs", {})
    assert definitions, "every message is a struct, so its schema has $defs"
    assert "$ref" in schema or "anyOf" in schema
    refs = [schema["$ref"]] if "$ref" in schema else [s["$ref"] for s in schema["anyOf"]]
    for ref, struct in zip(refs, members(MESSAGES[name]), strict=True):
        definition = definitions[ref.removeprefix("#/$defs/")]
        instance = msgspec.to_builtins(SAMPLES[struct])
        assert definition["type"] == "object"
        assert definition["properties"]["kind"] == {"enum": [TAGS[struct]]}
        assert set(definition["required"]) <= set(instance)
        assert set(instance) <= set(definition["properties"])
        assert "kind" in definition["required"]
    if "anyOf" in schema:
        assert schema["discriminator"]["propertyName"] == "kind"
    msgspec.json.encode(schema)  # exportable as a file


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_a_json_instance_validates_against_its_own_schema_and_a_broken_one_does_not(
    name: str,
) -> None:
    schema = json_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for struct in members(MESSAGES[name]):
        instance = msgspec.json.decode(msgspec.json.encode(SAMPLES[struct]))
        validator.validate(instance)
        assert not validator.is_valid({**instance, "kind": "no.such.kind"})


def with_extra(struct: type[msgspec.Struct], **extra: Any) -> dict[str, Any]:
    # bytes stay bytes, as msgpack carries them (JSON would make them base64 text)
    fields: dict[str, Any] = msgspec.to_builtins(SAMPLES[struct], builtin_types=(bytes,))
    return {**fields, **extra}


INTERNAL = sorted((s for s in SAMPLES if not issubclass(s, Ingress)), key=lambda s: s.__name__)
INGRESS = [
    session.OpenSession,
    session.SessionLimits,
    session.SessionRef,
    tools.ToolCall,
    hooks.RunMark,
    approvals.ApprovalQuery,
    approvals.ApprovalAnswer,
    cancel.CancelCall,
    mcp.EffectOverride,
    mcp.SamplingAllowance,
    mcp.McpServerSpec,
    mcp.AddServer,
    mcp.ReviewServer,
    mcp.ListServers,
    mcp.RemoveServer,
    mcp.BrowseServer,
    frontdoor.CreateToken,
    frontdoor.ListTokens,
    frontdoor.RevokeToken,
]


def test_exactly_the_messages_an_agent_fills_are_ingress() -> None:
    assert {s for s in SAMPLES if issubclass(s, Ingress)} == set(INGRESS)


@pytest.mark.parametrize("struct", INTERNAL, ids=lambda s: s.__name__)
def test_an_internal_message_from_a_newer_sender_decodes_skipping_the_unknown_field(
    struct: type[msgspec.Struct],
) -> None:
    newer = msgspec.msgpack.encode(with_extra(struct, added_in_v2={"any": ["shape", 1]}))
    assert msgspec.msgpack.decode(newer, type=struct) == SAMPLES[struct]


@pytest.mark.parametrize("struct", INGRESS, ids=lambda s: s.__name__)
@pytest.mark.parametrize("codec", [msgspec.msgpack, msgspec.json], ids=["msgpack", "json"])
def test_an_ingress_message_refuses_an_unknown_field(
    struct: type[msgspec.Struct], codec: Any
) -> None:
    data = codec.encode(with_extra(struct, sneaky="x"))
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        codec.decode(data, type=struct)


OVERSIZED: list[tuple[type[msgspec.Struct], dict[str, Any], str]] = [
    (session.OpenSession, {"agent": "a" * 65}, "$.agent"),
    (session.OpenSession, {"tenant": "t" * 65}, "$.tenant"),
    (session.OpenSession, {"workspace": "/" + "w" * 4096}, "$.workspace"),
    (session.OpenSession, {"sandbox": "docker:" + "x" * 600}, "$.sandbox"),
    (session.OpenSession, {"network": "n" * 129}, "$.network"),
    (session.OpenSession, {"agent": "../etc"}, "$.agent"),
    (session.OpenSession, {"mcp": ["Notes"]}, "$.mcp[0]"),
    (mcp.AddServer, {"name": "no_underscores"}, "$.name"),
    (mcp.McpServerSpec, {"headers": ["no colon"]}, "$.headers[0]"),
    (mcp.McpServerSpec, {"sandbox": "chroot"}, "$.sandbox"),
    (mcp.McpServerSpec, {"url": "file:///etc/passwd"}, "$.url"),
    (session.OpenSession, {"limits": {"wall_s": 86401}}, "$.limits.wall_s"),
    (session.OpenSession, {"limits": {"output_bytes": 10}}, "$.limits.output_bytes"),
    (session.SessionRef, {"session_id": "0123456789abcdef0"}, "$.session_id"),
    (session.SessionRef, {"session_id": "*"}, "$.session_id"),
    (tools.ToolCall, {"tool": "t" * 129}, "$.tool"),
    (tools.ToolCall, {"input": {f"k{i}": i for i in range(65)}}, "$.input"),
    (tools.ToolCall, {"call_id": "c" * 65}, "$.call_id"),
    (approvals.ApprovalAnswer, {"request_id": "../x"}, "$.request_id"),
    (approvals.ApprovalAnswer, {"reason": "r" * 1025}, "$.reason"),
    (approvals.ApprovalQuery, {"tenant": "t" * 65}, "$.tenant"),
    (frontdoor.CreateToken, {"agent": "../x"}, "$.agent"),
    (frontdoor.CreateToken, {"mcp": ["Notes"]}, "$.mcp[0]"),
    (frontdoor.RevokeToken, {"token_id": "*"}, "$.token_id"),
]


@pytest.mark.parametrize(
    ("struct", "change", "where"), OVERSIZED, ids=[f"{s.__name__}-{w}" for s, _, w in OVERSIZED]
)
def test_an_ingress_message_refuses_an_oversized_or_malformed_value(
    struct: type[msgspec.Struct], change: dict[str, Any], where: str
) -> None:
    data = msgspec.json.encode(with_extra(struct, **change))
    with pytest.raises(msgspec.ValidationError, match=re.escape(f"at `{where}`")):
        msgspec.json.decode(data, type=struct)


def test_a_union_decodes_each_member_by_its_tag_alone() -> None:
    for name in ("Event", "FileRequest", "CallResult"):
        entry = MESSAGES[name]
        for struct in members(entry):
            decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(SAMPLES[struct]), type=entry)
            assert type(decoded) is struct
