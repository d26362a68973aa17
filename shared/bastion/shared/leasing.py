"""Asking the vault for secrets: a service's lease key, and leases opened with it.

A service the vault leases to (the sandbox service for commands' environments, the mcp
service for upstream servers' variables and headers) holds an X25519 private key and sends
its public half with each lease request; the vault seals the values to it, so they are in
clear only in that process. The vault leases only to public keys its operator listed
(`BASTION_VAULT_LEASE_KEYS`). The same key opens a tenant's redaction set
(`vault.redaction`): all its values, so that what one call leased stays cut out of every
later reply of the tenant's sessions.
"""

from __future__ import annotations

import secrets as random
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from bastion.proto import subjects
from bastion.proto.vault import (
    Lease,
    LeasedValues,
    LeaseRequest,
    RedactionRequest,
    RedactionValues,
)
from bastion.shared.bus import Client, Requester
from bastion.shared.codec import decode
from bastion.shared.keyfiles import read_x25519_key
from bastion.shared.sealing import open_sealed, public_bytes

__all__ = ["LeaseClient", "lease_context", "lease_key", "redaction_context"]


def lease_context(tenant: str, session_id: str, call_id: str) -> bytes:
    """What a lease is sealed for: one call of one session of one tenant."""
    return f"lease {tenant} {session_id} {call_id}".encode()


def redaction_context(tenant: str, session_id: str) -> bytes:
    """What a redaction set is sealed for: one tenant's values, asked for one session."""
    return f"redaction {tenant} {session_id}".encode()


def lease_key(key_file: str) -> X25519PrivateKey:
    """A service's lease key: from `key_file`, or a new one for this process's life."""
    if key_file:
        return read_x25519_key(Path(key_file).expanduser())
    return X25519PrivateKey.generate()


class LeaseClient:
    """Asks the vault for one call's secrets and opens the lease with the service's key."""

    def __init__(self, client: Client, key: X25519PrivateKey, timeout_s: float) -> None:
        self._bus = Requester(client, timeout_s)
        self._key = key
        self._public = public_bytes(key)

    async def lease(
        self, tenant: str, session_id: str, call_id: str, names: tuple[str, ...]
    ) -> list[tuple[str, str]]:
        """The (name, value) pairs of `names`; the vault's refusal is raised as it came."""
        call_id = call_id or f"exec-{random.token_hex(8)}"
        lease: Lease = await self._bus.ask(
            subjects.VAULT_LEASE,
            LeaseRequest(
                session_id=session_id,
                tenant=tenant,
                call_id=call_id,
                names=names,
                public_key=self._public,
            ),
            Lease,
        )
        context = lease_context(tenant, session_id, call_id)
        opened: LeasedValues = decode(open_sealed(self._key, lease.sealed, context), LeasedValues)
        return list(opened.values)

    async def redaction_values(self, tenant: str, session_id: str) -> list[tuple[str, str]]:
        """Every (name, value) of `tenant`, to cut out of replies only; the vault's
        refusal is raised as it came."""
        answer: RedactionValues = await self._bus.ask(
            subjects.VAULT_REDACTION,
            RedactionRequest(session_id=session_id, tenant=tenant, public_key=self._public),
            RedactionValues,
        )
        context = redaction_context(tenant, session_id)
        opened: LeasedValues = decode(open_sealed(self._key, answer.sealed, context), LeasedValues)
        return list(opened.values)
