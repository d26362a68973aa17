"""The orchestrator's endpoints: `session.open|check|get|close|run`, `session.<id>.call`,
`session.<id>.nested` (a run_code program's calls, from the sandbox service),
`session.<id>.cancel` and `approvals.list|answer`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from bastion.orchestrator.approvalstore import ApprovalStore
from bastion.orchestrator.audit import AuditLog
from bastion.orchestrator.callrecords import CallRecords
from bastion.orchestrator.cancelling import Cancels
from bastion.orchestrator.hooks import Hooks
from bastion.orchestrator.journal import Journal
from bastion.orchestrator.opencaps import OpenCaps
from bastion.orchestrator.quota import TenantRates
from bastion.orchestrator.sessions import Sessions
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.orchestrator.store import SessionStore
from bastion.orchestrator.turns import Turns
from bastion.proto import subjects
from bastion.proto.approvals import ApprovalAnswer, ApprovalAnswered, ApprovalList, ApprovalQuery
from bastion.proto.cancel import CancelAnswer, CancelCall
from bastion.proto.hooks import RunMark, RunMarked
from bastion.proto.session import OpeningChecked, OpenSession, SessionInfo, SessionRef
from bastion.proto.tools import CallResult, NestedCall, NestedResult, ToolCall
from bastion.shared.bus import Client
from bastion.shared.cancelling import listen
from bastion.shared.errors import InvalidInput
from bastion.shared.service import RequestContext, Service
from bastion.shared.version import VERSION

__all__ = ["orchestrator_service"]


def _session_of(context: RequestContext) -> str:
    # subject: bastion.v1.session.<id>.call (or .nested, .cancel)
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
        tasks_ask_s=settings.tasks_ask_s,
        parallel_reads=settings.session_parallel_reads,
    )
    await sessions.recover()
    cancels = Cancels(client, store, records, sessions.running, audit)
    await listen(client, sessions.running)

    async def open_session(ask: OpenSession, _: RequestContext) -> SessionInfo:
        return await sessions.open(ask)

    async def check_opening(ask: OpenSession, _: RequestContext) -> OpeningChecked:
        await sessions.check(ask)
        return OpeningChecked()

    async def get_session(ref: SessionRef, _: RequestContext) -> SessionInfo:
        return await sessions.get(ref.session_id)

    async def close_session(ref: SessionRef, _: RequestContext) -> SessionInfo:
        return await sessions.close(ref.session_id)

    async def call(tool_call: ToolCall, context: RequestContext) -> CallResult:
        return await sessions.call(_session_of(context), tool_call)

    async def nested(nested_call: NestedCall, context: RequestContext) -> NestedResult:
        return await sessions.nested.call(_session_of(context), nested_call)

    async def cancel(ask: CancelCall, context: RequestContext) -> CancelAnswer:
        return await cancels.cancel(_session_of(context), ask)

    async def run_mark(mark: RunMark, _: RequestContext) -> RunMarked:
        # A run ends once its calls have (a client gone mid-call leaves one running).
        ending = mark.event == "run_end"
        session = await (sessions.after_calls if ending else sessions.get)(mark.session_id)
        await audit.record(session, mark.event, outcome=mark.ended, summary=mark.task)
        return RunMarked(notes=await hooks.run_mark(session, mark))

    async def list_approvals(query: ApprovalQuery, _: RequestContext) -> ApprovalList:
        return await sessions.approvals.list(query)

    async def answer_approval(answer: ApprovalAnswer, _: RequestContext) -> ApprovalAnswered:
        return await sessions.approvals.answer(answer)

    service = Service("orchestrator", VERSION, "Sessions, and the route of every tool call.")
    service.add_endpoint("open", subjects.SESSION_OPEN, OpenSession, open_session)
    service.add_endpoint("check", subjects.SESSION_CHECK, OpenSession, check_opening)
    service.add_endpoint("get", subjects.SESSION_GET, SessionRef, get_session)
    service.add_endpoint("close", subjects.SESSION_CLOSE, SessionRef, close_session)
    service.add_endpoint("call", subjects.SESSION_CALL_ANY, ToolCall, call)
    service.add_endpoint("nested", subjects.SESSION_NESTED_ANY, NestedCall, nested)
    service.add_endpoint("cancel", subjects.SESSION_CANCEL_ANY, CancelCall, cancel)
    service.add_endpoint("run", subjects.SESSION_RUN, RunMark, run_mark)
    service.add_endpoint("approvals_list", subjects.APPROVALS_LIST, ApprovalQuery, list_approvals)
    service.add_endpoint(
        "approvals_answer", subjects.APPROVALS_ANSWER, ApprovalAnswer, answer_approval
    )
    async with anyio.create_task_group() as watching:
        await watching.start(hooks.watch)
        yield service
        watching.cancel_scope.cancel()
