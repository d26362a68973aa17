"""The orchestrator's endpoints: `session.open|get|close|run`, `session.<id>.call` and
`approvals.list|answer`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import anyio
import msgspec

from bastion.orchestrator.approvalstore import ApprovalStore
from bastion.orchestrator.audit import AuditLog
from bastion.orchestrator.callrecords import CallRecords
from bastion.orchestrator.hooks import Hooks
from bastion.orchestrator.journal import Journal
from bastion.orchestrator.opencaps import OpenCaps
from bastion.orchestrator.quota import TenantRates
from bastion.orchestrator.sessions import Sessions
from bastion.orchestrator.store import SessionStore
from bastion.orchestrator.turns import Turns
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalAnswer, ApprovalAnswered, ApprovalList, ApprovalQuery
from bastion.proto.hooks import RunMark, RunMarked
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.proto.tools import CallResult, ToolCall
from bastion.shared.bus import Client
from bastion.shared.errors import InvalidInput
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings
from bastion.shared.version import VERSION

__all__ = ["OrchestratorSettings", "orchestrator_service"]


class OrchestratorSettings(BusSettings, frozen=True, kw_only=True):
    """Where sessions and parked calls are kept, and how long a result from outside taints
    a session (`BASTION_TAINT_S`; 0 turns taint off)."""

    sessions_bucket: str = subjects.SESSIONS_BUCKET
    journal_bucket: str = subjects.JOURNAL_BUCKET
    journal_ttl_s: float = 7 * 24 * 3600.0
    """How long a journal entry is kept: an identical call after that runs again."""
    calls_bucket: str = subjects.CALLS_BUCKET
    """`BASTION_CALLS_BUCKET`: the KV bucket of each call's record by call id (its outcome,
    or that it is running), which answers a call sent again with the same id."""
    calls_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 7 * 24 * 3600.0
    """`BASTION_CALLS_TTL_S`: how long a call's record by call id is kept; the same call id
    sent after that is a new call."""
    hooks_bucket: str = subjects.HOOKS_BUCKET
    approvals_bucket: str = subjects.APPROVALS_BUCKET
    turns_bucket: str = subjects.TURNS_BUCKET
    turn_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """`BASTION_TURN_TTL_S`: how long a session's turn outlives an orchestrator that died
    holding it, before another replica takes the session over."""
    turn_wait_s: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    """`BASTION_TURN_WAIT_S`: how long a call waits for a turn another replica holds."""
    tenant_calls_per_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """`BASTION_TENANT_CALLS_PER_S`: each tenant's calls per second across every replica (a
    token bucket one second deep, in KV); 0: no quota."""
    tenant_calls_lease_s: Annotated[float, msgspec.Meta(gt=0)] = 0.05
    """`BASTION_TENANT_CALLS_LEASE_S`: how long a replica spends a batch of a tenant's
    tokens (the rate times this, at least 1) taken from the shared bucket by one
    compare-and-set; a tenant may exceed its rate over a window by one such lease."""
    quota_bucket: str = subjects.QUOTA_BUCKET
    """`BASTION_QUOTA_BUCKET`: the KV bucket of each tenant's calls-per-second bucket."""
    max_sessions_per_tenant: Annotated[int, msgspec.Meta(ge=0)] = 256
    """`BASTION_MAX_SESSIONS_PER_TENANT`: sessions one tenant may have open at once, across
    every replica; 0: no cap."""
    max_sessions_per_token: Annotated[int, msgspec.Meta(ge=0)] = 64
    """`BASTION_MAX_SESSIONS_PER_TOKEN`: sessions one front-door token may have open at
    once, across every replica; 0: no cap."""
    taint_s: Annotated[float, msgspec.Meta(ge=0)] = 600.0
    search: str = ""
    """`BASTION_SEARCH`, the egress service's variable too: set, `web` sessions get
    `web_search` (the orchestrator only asks whether it is set; the key is not its)."""


def _session_of(context: RequestContext) -> str:
    # subject: bastion.v1.session.<id>.call
    session_id = context.subject.split(".")[3]
    if len(session_id) != 16 or not all(c in "0123456789abcdef" for c in session_id):
        raise InvalidInput(f"{session_id!r} is not a session id (16 lowercase hex digits)")
    return session_id


@asynccontextmanager
async def orchestrator_service(
    client: Client, settings: OrchestratorSettings
) -> AsyncIterator[Service]:
    store = await SessionStore.open(client, settings.sessions_bucket)
    journal = await Journal.open(client, settings.journal_bucket, settings.journal_ttl_s)
    audit = await AuditLog.open(client)
    hooks = await Hooks.open(client, settings.hooks_bucket)
    approvals = await ApprovalStore.open(client, settings.approvals_bucket)
    turns = await Turns.open(
        client, settings.turns_bucket, settings.turn_ttl_s, settings.turn_wait_s
    )
    records = await CallRecords.open(
        client, settings.calls_bucket, settings.calls_ttl_s, turns.holder
    )
    sessions = Sessions(
        client,
        store,
        settings.request_timeout_s,
        approvals,
        settings.taint_s,
        journal=journal,
        audit=audit,
        hooks=hooks,
        turns=turns,
        rates=await TenantRates.open(
            client,
            settings.quota_bucket,
            settings.tenant_calls_per_s,
            lease_s=settings.tenant_calls_lease_s,
        ),
        caps=OpenCaps(store, settings.max_sessions_per_tenant, settings.max_sessions_per_token),
        records=records,
        search=bool(settings.search.strip()),
    )
    await sessions.recover()

    async def open_session(ask: OpenSession, _: RequestContext) -> SessionInfo:
        return await sessions.open(ask)

    async def get_session(ref: SessionRef, _: RequestContext) -> SessionInfo:
        return await sessions.get(ref.session_id)

    async def close_session(ref: SessionRef, _: RequestContext) -> SessionInfo:
        return await sessions.close(ref.session_id)

    async def call(tool_call: ToolCall, context: RequestContext) -> CallResult:
        return await sessions.call(_session_of(context), tool_call)

    async def run_mark(mark: RunMark, _: RequestContext) -> RunMarked:
        session = await sessions.get(mark.session_id)
        await audit.record(session, mark.event, outcome=mark.ended, summary=mark.task)
        return RunMarked(notes=await hooks.run_mark(session, mark))

    async def list_approvals(query: ApprovalQuery, _: RequestContext) -> ApprovalList:
        return await sessions.approvals.list(query)

    async def answer_approval(answer: ApprovalAnswer, _: RequestContext) -> ApprovalAnswered:
        return await sessions.approvals.answer(answer)

    service = Service("orchestrator", VERSION, "Sessions, and the route of every tool call.")
    service.add_endpoint("open", subjects.SESSION_OPEN, OpenSession, open_session)
    service.add_endpoint("get", subjects.SESSION_GET, SessionRef, get_session)
    service.add_endpoint("close", subjects.SESSION_CLOSE, SessionRef, close_session)
    service.add_endpoint("call", subjects.SESSION_CALL_ANY, ToolCall, call)
    service.add_endpoint("run", subjects.SESSION_RUN, RunMark, run_mark)
    service.add_endpoint("approvals_list", subjects.APPROVALS_LIST, ApprovalQuery, list_approvals)
    service.add_endpoint(
        "approvals_answer", subjects.APPROVALS_ANSWER, ApprovalAnswer, answer_approval
    )
    async with anyio.create_task_group() as watching:
        await watching.start(hooks.watch)
        yield service
        watching.cancel_scope.cancel()
