"""Writing to the audit log, for every service that records what happened to a session.

Shared by the services that audit (the orchestrator: decisions, calls, results, approvals;
the egress service: connections; the vault: every secret read). The stream `bastion_audit`
keeps `bastion.v1.audit.<tenant>.<session>`; it is file-backed and refuses deletes and
purges. `store_record` raises when a record is not stored (the vault refuses a lease it
cannot audit); `publish_audit` logs it instead (the call it describes already happened).
`send_record` publishes a record at once and `confirm_record` awaits its acknowledgement
later (logging a record not stored), so records sent one after another go out in order
and are acknowledged together.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from typing import Any, Final

import nats.errors
import nats.js.errors
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext

from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.shared.bus import Client, Stored, send_stored
from bastion.shared.codec import encode
from bastion.shared.errors import Unavailable
from bastion.shared.kv import replicas
from bastion.shared.telemetry import headers_with_context

__all__ = [
    "PUBLISH_TIMEOUT_S",
    "audit_record",
    "confirm_record",
    "open_audit_stream",
    "publish_audit",
    "send_record",
    "store_record",
]

logger = logging.getLogger(__name__)

PUBLISH_TIMEOUT_S: Final = 5.0


async def open_audit_stream(client: Client) -> JetStreamContext:
    """The JetStream context, with the audit stream created if it is missing."""
    js = client.jetstream()
    try:
        await js.stream_info(subjects.AUDIT_STREAM)
    except nats.js.errors.NotFoundError:
        # Another service may create it meanwhile, with the same configuration.
        with contextlib.suppress(nats.js.errors.BadRequestError):
            await js.add_stream(
                StreamConfig(
                    name=subjects.AUDIT_STREAM,
                    subjects=[subjects.AUDIT_ALL],
                    storage=StorageType.FILE,
                    deny_delete=True,
                    deny_purge=True,
                    num_replicas=replicas(),
                )
            )
    return js


def audit_record(action: str, session_id: str, tenant: str, **fields: Any) -> AuditRecord:
    """A record of `action` in `tenant`'s session `session_id`, stamped now."""
    return AuditRecord(
        action=action, session_id=session_id, tenant=tenant, at=datetime.now(UTC), **fields
    )


async def store_record(js: JetStreamContext, record: AuditRecord) -> None:
    """Store `record` on its session's audit subject, acknowledged by the stream.

    Raises:
        Unavailable: the stream did not acknowledge it in time.
    """
    try:
        await js.publish(
            subjects.audit(record.tenant, record.session_id),
            encode(record),
            timeout=PUBLISH_TIMEOUT_S,
            # The call's trace, so that a record leads to the spans of the call it is about.
            headers=headers_with_context() or None,
        )
    except (nats.errors.Error, TimeoutError):
        raise Unavailable(
            "the audit log did not store a record: is JetStream running with room left?"
        ) from None


async def publish_audit(js: JetStreamContext, record: AuditRecord) -> None:
    """Store `record`; a failure is logged, not raised."""
    try:
        await store_record(js, record)
    except Unavailable:
        _not_stored(record)


def _not_stored(record: AuditRecord) -> None:
    logger.error(
        "an audit record was not stored",
        extra={"session": record.session_id, "action": record.action},
    )


async def send_record(client: Client, record: AuditRecord) -> Stored | None:
    """Publish `record` now (before anything this client sends after it), as `store_record`
    does, its acknowledgement to be awaited with `confirm_record`; None (and logged) when it
    could not be sent."""
    try:
        return await send_stored(
            client,
            subjects.audit(record.tenant, record.session_id),
            encode(record),
            headers=headers_with_context() or None,
            timeout_s=PUBLISH_TIMEOUT_S,
        )
    except nats.errors.Error:
        _not_stored(record)
        return None


async def confirm_record(record: AuditRecord, sent: Stored | None) -> None:
    """Wait for the stream to acknowledge `record` as `send_record` sent it; a record not
    stored (or never sent) is logged, not raised."""
    if sent is None:
        return
    try:
        await sent.sequence()
    except nats.errors.Error:
        _not_stored(record)
