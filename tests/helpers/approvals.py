"""A person's side of approvals on the bus: list what waits, answer it, read the audit."""

from __future__ import annotations

import msgspec
import nats.js.errors

from bastion.proto import subjects
from bastion.proto.approvals import (
    ApprovalAnswer,
    ApprovalAnswered,
    ApprovalList,
    ApprovalQuery,
    ParkedCall,
)
from bastion.proto.audit import AuditRecord
from bastion.shared.bus import Client, request
from bastion.shared.codec import decode

__all__ = ["answer", "as_running", "pending", "records_of"]


async def pending(client: Client, session_id: str | None = None, **query: object) -> ApprovalList:
    """The approvals the query finds (a session's, or all), as `bastion approvals` lists them."""
    found: ApprovalList = await request(
        client,
        subjects.APPROVALS_LIST,
        ApprovalQuery(session_id=session_id, **query),  # type: ignore[arg-type]
        ApprovalList,
        timeout_s=10,
    )
    return found


async def answer(client: Client, request_id: str, **fields: object) -> ApprovalAnswered:
    """Answer a parked call as person `cli:tester` (`approve=True`, `reason=…`, …)."""
    answered: ApprovalAnswered = await request(
        client,
        subjects.APPROVALS_ANSWER,
        ApprovalAnswer(request_id=request_id, by="cli:tester", **fields),  # type: ignore[arg-type]
        ApprovalAnswered,
        timeout_s=30,
    )
    return answered


def as_running(parked: ParkedCall) -> ParkedCall:
    """A parked call as its store shows one whose runner died while it ran."""
    return msgspec.structs.replace(parked, state="running", answered_by="cli:gone")


async def records_of(
    client: Client, tenant: str, session_id: str
) -> list[tuple[bytes, AuditRecord]]:
    """The session's records in the order the stream keeps them, each with its raw bytes."""
    js = client.jetstream()
    found: list[tuple[bytes, AuditRecord]] = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(
                subjects.AUDIT_STREAM, seq, subject=subjects.audit(tenant, session_id), next=True
            )
        except nats.js.errors.NotFoundError:
            return found
        assert msg.data is not None and msg.seq is not None
        found.append((msg.data, decode(msg.data, AuditRecord)))
        seq = msg.seq + 1
