"""The sandbox service's side of leases: its key, asking the vault, and what it leased.

The service holds an X25519 private key (from `BASTION_SANDBOX_KEY_FILE`, or made at start)
and sends its public half with each lease request; the vault seals the values to it, so
they are in clear only in this process and in the one command's environment. Each
session's leased values are remembered (in memory, until the session is released) so that
every reply of that session, file tools' too, has them cut out.
"""

from __future__ import annotations

import secrets as random
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from bastion.proto import subjects
from bastion.proto.vault import Lease, LeasedValues, LeaseRequest
from bastion.shared.bus import Client, request
from bastion.shared.codec import decode
from bastion.shared.keyfiles import read_x25519_key
from bastion.shared.redaction import Redactor
from bastion.shared.sealing import open_sealed, public_bytes

__all__ = ["LeaseClient", "SessionSecrets", "sandbox_key"]

MAX_SESSIONS = 4096


def sandbox_key(key_file: str) -> X25519PrivateKey:
    """The service's lease key: from `key_file`, or a new one for this process's life."""
    if key_file:
        return read_x25519_key(Path(key_file).expanduser())
    return X25519PrivateKey.generate()


class LeaseClient:
    """Asks the vault for one call's secrets and opens the lease with the service's key."""

    def __init__(self, client: Client, key: X25519PrivateKey, timeout_s: float) -> None:
        self._client = client
        self._key = key
        self._public = public_bytes(key)
        self._timeout_s = timeout_s

    async def lease(
        self, tenant: str, session_id: str, call_id: str, names: tuple[str, ...]
    ) -> list[tuple[str, str]]:
        """The (name, value) pairs of `names`; the vault's refusal is raised as it came."""
        call_id = call_id or f"exec-{random.token_hex(8)}"
        lease: Lease = await request(
            self._client,
            subjects.VAULT_LEASE,
            LeaseRequest(
                session_id=session_id,
                tenant=tenant,
                call_id=call_id,
                names=names,
                public_key=self._public,
            ),
            Lease,
            timeout_s=self._timeout_s,
        )
        context = f"lease {tenant} {session_id} {call_id}".encode()
        opened: LeasedValues = decode(open_sealed(self._key, lease.sealed, context), LeasedValues)
        return list(opened.values)


class SessionSecrets:
    """What each session has leased, and the redactor that cuts it out of its replies."""

    def __init__(self) -> None:
        self._leased: dict[str, set[tuple[str, str]]] = {}
        self._redactors: dict[str, Redactor] = {}

    def remember(self, session_id: str, pairs: list[tuple[str, str]]) -> Redactor:
        if session_id not in self._leased and len(self._leased) >= MAX_SESSIONS:
            oldest = next(iter(self._leased))
            self.forget(oldest)
        held = self._leased.setdefault(session_id, set())
        held.update(pairs)  # a value replaced in the vault meanwhile is still cut: both are
        redactor = Redactor(sorted(held))
        self._redactors[session_id] = redactor
        return redactor

    def redactor(self, session_id: str) -> Redactor | None:
        return self._redactors.get(session_id)

    def forget(self, session_id: str) -> None:
        self._leased.pop(session_id, None)
        self._redactors.pop(session_id, None)
