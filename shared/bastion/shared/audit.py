"""Writing to the audit log: the stream that keeps every record, and one record stored.

Shared by the services that audit (the orchestrator: calls and decisions; the vault: every
secret read). The stream `bastion_audit` is file-backed and refuses deletes and purges.
"""

from __future__ import annotations

from typing import Final

import nats.errors
import nats.js.errors
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext

from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.shared.bus import Client
from bastion.shared.codec import encode
from bastion.shared.errors import Unavailable

__all__ = ["PUBLISH_TIMEOUT_S", "open_audit_stream", "store_record"]

PUBLISH_TIMEOUT_S: Final = 5.0


async def open_audit_stream(client: Client) -> JetStreamContext:
    """The JetStream context, with the audit stream created if it is missing."""
    js = client.jetstream()
    try:
        await js.stream_info(subjects.AUDIT_STREAM)
    except nats.js.errors.NotFoundError:
        await js.add_stream(
            StreamConfig(
                name=subjects.AUDIT_STREAM,
                subjects=[subjects.AUDIT_ALL],
                storage=StorageType.FILE,
                deny_delete=True,
                deny_purge=True,
            )
        )
    return js


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
        )
    except (nats.errors.Error, TimeoutError):
        raise Unavailable(
            "the audit log did not store a record: is JetStream running with room left?"
        ) from None
