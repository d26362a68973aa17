"""The orchestrator's endpoints: `session.open|get|close` and `session.<id>.call`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bastion.orchestrator.sessions import Sessions
from bastion.orchestrator.store import SessionStore
from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.proto.tools import CallResult, ToolCall
from bastion.shared.bus import Client
from bastion.shared.errors import InvalidInput
from bastion.shared.service import RequestContext, Service
from bastion.shared.settings import BusSettings
from bastion.shared.version import VERSION

__all__ = ["OrchestratorSettings", "orchestrator_service"]


class OrchestratorSettings(BusSettings, frozen=True, kw_only=True):
    sessions_bucket: str = "bastion_sessions"


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
    sessions = Sessions(client, store, settings.request_timeout_s)

    async def open_session(ask: OpenSession, _: RequestContext) -> SessionInfo:
        return await sessions.open(ask)

    async def get_session(ref: SessionRef, _: RequestContext) -> SessionInfo:
        return await sessions.get(ref.session_id)

    async def close_session(ref: SessionRef, _: RequestContext) -> SessionInfo:
        return await sessions.close(ref.session_id)

    async def call(tool_call: ToolCall, context: RequestContext) -> CallResult:
        return await sessions.call(_session_of(context), tool_call)

    service = Service("orchestrator", VERSION, "Sessions, and the route of every tool call.")
    service.add_endpoint("open", subjects.SESSION_OPEN, OpenSession, open_session)
    service.add_endpoint("get", subjects.SESSION_GET, SessionRef, get_session)
    service.add_endpoint("close", subjects.SESSION_CLOSE, SessionRef, close_session)
    service.add_endpoint("call", subjects.SESSION_CALL_ANY, ToolCall, call)
    yield service
