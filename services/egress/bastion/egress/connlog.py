"""Each connection, allowed or refused with its reason, into the session's audit log and
the grant's connection log (the KV bucket `bastion_egress_connections`).

A line is cut (`cut`: the grant's secret values, by digest) before it is logged, published
to the audit or stored: a program can spell a value into a host name it is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import nats.errors
from nats.js.client import JetStreamContext

from bastion.proto import subjects
from bastion.proto.audit import MAX_SUMMARY
from bastion.proto.egress import MAX_CONNECTIONS, ConnectionLog
from bastion.shared.audit import audit_record, open_audit_stream, publish_audit
from bastion.shared.bus import Client
from bastion.shared.kv import KeptChanging, TypedBucket

__all__ = ["ConnectionRecorder"]

logger = logging.getLogger(__name__)


class ConnectionRecorder:
    """Records connections; a record that cannot be stored is logged, not raised."""

    def __init__(self, js: JetStreamContext, logs: TypedBucket[ConnectionLog]) -> None:
        self._js = js
        self._logs = logs

    @classmethod
    async def open(cls, client: Client, ttl_s: float) -> ConnectionRecorder:
        js = await open_audit_stream(client)
        bucket = subjects.EGRESS_CONNECTIONS_BUCKET
        return cls(js, await TypedBucket.open(client, bucket, ConnectionLog, ttl_s=ttl_s))

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
            self._js,
            audit_record(
                "egress",
                session_id,
                tenant,
                tool=tool,
                call_id=call_id[:64],
                outcome="allowed" if refused is None else "refused",
                summary=line[:MAX_SUMMARY],
            ),
        )
        if grant_id:
            await self._append(grant_id, line[:600])

    async def _append(self, grant_id: str, line: str) -> None:
        def appended(log: ConnectionLog | None) -> ConnectionLog:
            log = log or ConnectionLog(grant_id=grant_id)
            if len(log.lines) < MAX_CONNECTIONS:
                return ConnectionLog(grant_id=grant_id, lines=(*log.lines, line), more=log.more)
            return ConnectionLog(grant_id=grant_id, lines=log.lines, more=log.more + 1)

        try:
            await self._logs.update(grant_id, appended, attempts=10)
        except (KeptChanging, nats.errors.Error, TimeoutError):
            logger.error("a connection was not added to its grant's log", extra={"grant": grant_id})

    async def connections(self, grant_id: str) -> ConnectionLog:
        """The grant's log so far (empty for a grant nothing connected with)."""
        found = await self._logs.find(grant_id)
        return ConnectionLog(grant_id=grant_id) if found is None else found.value
