"""Each connection, allowed or refused with its reason, into the session's audit log and
the grant's connection log (the KV bucket `bastion_egress_connections`).

A line is cut (`cut`: the grant's secret values, by digest) before it is logged, published
to the audit or stored: a program can spell a value into a host name it is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import nats.errors
import nats.js.errors
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from bastion.proto import subjects
from bastion.proto.audit import MAX_SUMMARY, AuditRecord
from bastion.proto.egress import MAX_CONNECTIONS, ConnectionLog
from bastion.shared.audit import open_audit_stream, publish_audit
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode
from bastion.shared.kv import open_bucket

__all__ = ["ConnectionRecorder"]

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class ConnectionRecorder:
    """Records connections; a record that cannot be stored is logged, not raised."""

    js: JetStreamContext
    kv: KeyValue

    @classmethod
    async def open(cls, client: Client, ttl_s: float) -> ConnectionRecorder:
        js = await open_audit_stream(client)
        kv = await open_bucket(client, subjects.EGRESS_CONNECTIONS_BUCKET, ttl_s=ttl_s)
        return cls(js, kv)

    async def record(
        self,
        *,
        session_id: str,
        tenant: str,
        target: str,
        refused: str | None,
        grant_id: str = "",
        call_id: str = "",
        tool: str = "egress",
        cut: Callable[[str], str] = str,
    ) -> None:
        """`target allowed` or `target refused: reason`, in the audit and the grant's log,
        with `cut` applied to it first."""
        line = cut(f"{target} allowed" if refused is None else f"{target} refused: {refused}")
        target = cut(target)
        logger.info(
            "egress connection",
            extra={"session": session_id, "target": target, "allowed": refused is None},
        )
        await publish_audit(
            self.js,
            AuditRecord(
                action="egress",
                session_id=session_id,
                tenant=tenant,
                at=datetime.now(UTC),
                tool=tool,
                call_id=call_id[:64],
                outcome="allowed" if refused is None else "refused",
                summary=line[:MAX_SUMMARY],
            ),
        )
        if grant_id:
            await self._append(grant_id, line[:600])

    async def _append(self, grant_id: str, line: str, attempts: int = 10) -> None:
        for _ in range(attempts):
            log, revision = await self._read(grant_id)
            if len(log.lines) < MAX_CONNECTIONS:
                log = ConnectionLog(grant_id=grant_id, lines=(*log.lines, line), more=log.more)
            else:
                log = ConnectionLog(grant_id=grant_id, lines=log.lines, more=log.more + 1)
            try:
                if revision is None:
                    await self.kv.create(grant_id, encode(log))
                else:
                    await self.kv.update(grant_id, encode(log), last=revision)
                return
            except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.BadRequestError):
                continue
            except (nats.errors.Error, TimeoutError):
                break
        logger.error("a connection was not added to its grant's log", extra={"grant": grant_id})

    async def _read(self, grant_id: str) -> tuple[ConnectionLog, int | None]:
        try:
            entry = await self.kv.get(grant_id)
        except nats.js.errors.KeyNotFoundError:
            return ConnectionLog(grant_id=grant_id), None
        assert entry.value is not None
        return decode(entry.value, ConnectionLog), entry.revision

    async def connections(self, grant_id: str) -> ConnectionLog:
        """The grant's log so far (empty for a grant nothing connected with)."""
        return (await self._read(grant_id))[0]
