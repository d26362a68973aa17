"""An agent's side of a session on the bus: open it, call a tool, read it back."""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.proto import subjects
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner

__all__ = ["call", "open_session", "orchestrator", "session_of", "tool"]


def orchestrator(
    run_service: ServiceRunner, bus_settings: BusSettings
) -> AbstractAsyncContextManager[Service]:
    """An orchestrator of its own for a test to start, stop and start again."""
    return run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url))


async def open_session(client: Client, **fields: object) -> SessionInfo:
    """Open a session as agent `tester` with `fields` (workspace, autonomy, shell, …)."""
    ask = msgspec.convert({"agent": "tester", **fields}, OpenSession)
    info: SessionInfo = await request(client, subjects.SESSION_OPEN, ask, SessionInfo, timeout_s=10)
    return info


async def call(client: Client, session_id: str, tool: str, **tool_input: object) -> CallResult:
    """One call as an agent makes it: a refusal is an answer (an ErrorReply), not an exception."""
    try:
        result: CallResult = await request(
            client,
            subjects.session_call(session_id),
            ToolCall(tool=tool, input=dict(tool_input)),
            CallResult,
            timeout_s=30,
        )
    except RemoteError as error:
        return error.to_reply()
    return result


async def session_of(client: Client, session_id: str) -> SessionInfo:
    """The session as the orchestrator keeps it now."""
    info: SessionInfo = await request(
        client, subjects.SESSION_GET, SessionRef(session_id=session_id), SessionInfo, timeout_s=10
    )
    return info


async def tool(client: Client, session_id: str, name: str, **given: Any) -> Any:
    """A call's answer, decoded from the JSON the model is shown."""
    result = await call(client, session_id, name, **given)
    assert isinstance(result, ToolOutput), result
    return json.loads(result.text)
