"""Writing to the audit log, for every service that records what happened to a session.

The stream `bastion_audit` keeps `bastion.v1.audit.<tenant>.<session>`; it is file-backed
and refuses deletes and purges. A record that cannot be stored is logged, never raised:
the call it describes has already happened.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Final

import nats.errors
import nats.js.errors
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext

from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.shared.bus import Client
from bastion.shared.codec import encode

__all__ = ["PUBLISH_TIMEOUT_S", "open_audit_stream", "publish_audit"]

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
                )
            )
    return js


async def publish_audit(js: JetStreamContext, record: AuditRecord) -> None:
    """Store `record` under its session's subject; a failure is logged, not raised."""
    try:
        await js.publish(
            subjects.audit(record.tenant, record.session_id),
            encode(record),
            timeout=PUBLISH_TIMEOUT_S,
        )
    except (nats.errors.Error, TimeoutError):
        logger.error(
            "an audit record was not stored",
            extra={"session": record.session_id, "action": record.action},
        )
