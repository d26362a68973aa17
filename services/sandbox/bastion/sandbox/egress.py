"""The sandbox service's side of the `declared` network: a grant per call, then its log.

The grant carries, for the values to cut from what the proxy records, only a fresh salt and
the keyed digests of their forms (`bastion.shared.hostcuts`): never a value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bastion.proto import subjects
from bastion.proto.egress import ConnectionLog, ConnectionsRequest, EgressGrant, GrantRequest
from bastion.shared.bus import Requester
from bastion.shared.hostcuts import form_digests, new_salt

__all__ = ["GRANT_MARGIN_S", "EgressClient"]

GRANT_MARGIN_S = 30.0
"""A grant outlives its command's wall clock by this much; it is revoked when it ends."""


@dataclass(frozen=True, eq=False)
class EgressClient(Requester):
    """Asks the egress service for one call's grant, and ends it with its connection line."""

    async def grant(
        self,
        session_id: str,
        tenant: str,
        call_id: str,
        hosts: tuple[str, ...],
        wall_s: float,
        *,
        cuts: Sequence[tuple[str, str]] = (),
    ) -> EgressGrant:
        """A grant to `hosts` (`true` among them: any public host) for one command, under
        which the proxy cuts the (name, value) pairs `cuts` from what it records."""
        named = tuple(host for host in hosts if host != "true")
        salt = new_salt()
        grant: EgressGrant = await self.ask(
            subjects.EGRESS_GRANT,
            GrantRequest(
                session_id=session_id,
                tenant=tenant,
                hosts=named,
                any_public_host="true" in hosts,
                ttl_s=min(wall_s + GRANT_MARGIN_S, 86400.0),
                call_id=call_id,
                cut_salt=salt,
                cuts=form_digests(cuts, salt),
            ),
            EgressGrant,
        )
        return grant

    async def close(self, grant_id: str) -> str:
        """Revoke the grant (its call is over) and say what it connected to."""
        log: ConnectionLog = await self.ask(
            subjects.EGRESS_CONNECTIONS,
            ConnectionsRequest(grant_id=grant_id, revoke=True),
            ConnectionLog,
        )
        return log.summary()
