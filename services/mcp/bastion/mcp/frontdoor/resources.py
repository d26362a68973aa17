"""Resources: the agent's sessions (`bastion://sessions`) and each one's transcript
(`bastion://sessions/{id}`: its calls, decisions and outcomes, from the audit log).

The list holds the sessions this token opened that are still kept (its live MCP sessions
and its stateless session). A transcript may be read of any session of the token's agent
in its tenant, closed ones too. The audit log never holds a secret value or a whole input,
so neither does a transcript.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

import msgspec
import nats.errors
import nats.js.errors
from mcp.server.context import ServerRequestContext
from mcp_types import (
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextResourceContents,
)

from bastion.mcp.frontdoor.binding import Binding
from bastion.mcp.frontdoor.guard import Agent
from bastion.mcp.frontdoor.records import SessionRecords
from bastion.mcp.frontdoor.tools import mcp_error, request_agent
from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.proto.session import SessionInfo
from bastion.shared.bus import Client
from bastion.shared.carry import viewed
from bastion.shared.codec import decode
from bastion.shared.errors import BastionError, NotFound, Unavailable

__all__ = ["ResourceHandlers"]

SESSIONS_URI: Final = "bastion://sessions"
_SESSION_URI: Final = re.compile(r"^bastion://sessions/([0-9a-f]{16})$")
MAX_RECORDS: Final = 2000
"""The most audit records a transcript shows (the oldest first)."""
_JSON: Final = "application/json"


class _Session(msgspec.Struct, frozen=True):
    session_id: str
    state: str
    opened_at: datetime
    closed_at: datetime | None
    calls: int
    autonomy: str
    workspace: str | None
    waiting_for: str


class _Line(msgspec.Struct, frozen=True, omit_defaults=True):
    at: datetime
    action: str
    tool: str = ""
    call_id: str = ""
    outcome: str = ""
    rule: str = ""
    summary: str = ""
    by: str = ""


class _Transcript(msgspec.Struct, frozen=True):
    session: _Session
    records: list[_Line]
    cut: bool


class ResourceHandlers:
    """`resources/list`, `resources/templates/list` and `resources/read`."""

    def __init__(self, client: Client, binding: Binding, records: SessionRecords) -> None:
        self._client = client
        self._binding = binding
        self._records = records

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], _params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        agent, _ = request_agent(ctx)
        listed = [
            Resource(
                uri=SESSIONS_URI,
                name="sessions",
                description="This agent's Bastion sessions opened through the front door",
                mime_type=_JSON,
            )
        ]
        for session_id in await self._session_ids(agent):
            listed.append(
                Resource(
                    uri=f"{SESSIONS_URI}/{session_id}",
                    name=f"session {session_id}",
                    description="The session's calls, decisions and outcomes",
                    mime_type=_JSON,
                )
            )
        return ListResourcesResult(resources=listed)

    async def list_templates(
        self, _ctx: ServerRequestContext[Any, Any], _params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(
            resource_templates=[
                ResourceTemplate(
                    uri_template=SESSIONS_URI + "/{session_id}",
                    name="session transcript",
                    description="A session's calls, decisions and outcomes, from the audit log",
                    mime_type=_JSON,
                )
            ]
        )

    async def read(
        self, ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        agent, _ = request_agent(ctx)
        uri = str(params.uri)
        try:
            if uri == SESSIONS_URI:
                sessions = [
                    viewed(await self._binding.info(s), _Session)
                    for s in await self._session_ids(agent)
                ]
                text = msgspec.json.encode({"sessions": sessions}).decode()
            else:
                found = _SESSION_URI.match(uri)
                if found is None:
                    raise NotFound(
                        f"there is no resource {uri[:100]}: this server has {SESSIONS_URI} and "
                        f"{SESSIONS_URI}/<session id>"
                    )
                text = await self._transcript(agent, found[1])
        except BastionError as error:
            raise mcp_error(error) from None
        return ReadResourceResult(
            contents=[TextResourceContents(uri=uri, mime_type=_JSON, text=text)]
        )

    async def _session_ids(self, agent: Agent) -> list[str]:
        found = await self._records.of_token(agent.token_hash)
        return sorted({r.bastion_session_id for r in found if r.bastion_session_id})

    async def _transcript(self, agent: Agent, session_id: str) -> str:
        try:
            info = await self._binding.info(session_id)
        except BastionError:
            info = None
        if info is None or (info.agent, info.tenant) != (agent.info.agent, agent.info.tenant):
            raise NotFound(
                f"there is no session {session_id} of agent {agent.info.agent}: "
                f"{SESSIONS_URI} lists this agent's sessions"
            )
        records, cut = await self._audit(info)
        lines = [viewed(r, _Line) for r in records]
        return msgspec.json.encode(
            _Transcript(session=viewed(info, _Session), records=lines, cut=cut)
        ).decode()

    async def _audit(self, info: SessionInfo) -> tuple[list[AuditRecord], bool]:
        js = self._client.jetstream()
        subject = subjects.audit(info.tenant, info.session_id)
        records: list[AuditRecord] = []
        seq = 1
        try:
            while len(records) < MAX_RECORDS:
                msg = await js.get_msg(subjects.AUDIT_STREAM, seq, subject=subject, next=True)
                if msg.data is None or msg.seq is None:
                    break
                records.append(decode(msg.data, AuditRecord))
                seq = msg.seq + 1
            else:
                return records, True
        except nats.js.errors.NotFoundError:
            pass
        except (nats.errors.Error, TimeoutError):
            raise Unavailable("the audit log could not be read: is JetStream running?") from None
        return records, False
