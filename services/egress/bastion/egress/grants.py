"""Grants: issued per call over NATS, kept in a KV bucket with a TTL, checked per connection.

A grant keeps, beside its hosts, the salt and the digests of the forms of the tenant's
secret values the sandbox service sent with it (never a value): what the proxy cuts from
the lines it records for the grant (`cutter`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from datetime import UTC, datetime, timedelta

from bastion.egress.errors import GrantRefused, Refused
from bastion.egress.hosts import Declared
from bastion.proto import subjects
from bastion.proto.egress import EgressGrant, GrantRecord, GrantRequest
from bastion.shared.bus import Client
from bastion.shared.carry import carried
from bastion.shared.errors import InvalidInput
from bastion.shared.hostcuts import DigestCutter
from bastion.shared.kv import TypedBucket

__all__ = ["GrantStore", "credentials", "cutter"]

_KEPT = ("session_id", "tenant", "hosts", "any_public_host", "call_id", "cut_salt", "cuts")
"""What a grant's record keeps of its request, as asked."""

_HOW = (
    "send Proxy-Authorization: Basic base64(<grant id>:<secret>) with a grant from "
    f"{subjects.EGRESS_GRANT}"
)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def cutter(record: GrantRecord) -> DigestCutter:
    """What cuts the grant's secret values (by their digests) from a line about it."""
    return DigestCutter(record.cut_salt, record.cuts)


def credentials(header: str | None) -> tuple[str, str]:
    """The grant id and secret of a `Proxy-Authorization: Basic` header.

    Raises:
        GrantRefused: there is none, or it is not Basic credentials.
    """
    if not header:
        raise GrantRefused(f"this proxy lets nothing through without a grant: {_HOW}")
    scheme, _, value = header.strip().partition(" ")
    try:
        grant_id, sep, secret = (
            base64.b64decode(value.strip(), validate=True).decode().partition(":")
        )
    except (binascii.Error, UnicodeDecodeError):
        sep = ""
    if scheme.lower() != "basic" or not sep:
        raise GrantRefused(f"the proxy credentials are not a grant: {_HOW}")
    return grant_id, secret


class GrantStore:
    """Grants in the KV bucket `bastion_egress_grants`; the bucket's TTL bounds every grant."""

    def __init__(self, bucket: TypedBucket[GrantRecord], max_ttl_s: float, proxy: str) -> None:
        self._bucket = bucket
        self._max_ttl_s = max_ttl_s
        self.proxy = proxy

    @classmethod
    async def open(cls, client: Client, max_ttl_s: float, proxy: str) -> GrantStore:
        bucket = await TypedBucket.open(
            client, subjects.EGRESS_GRANTS_BUCKET, GrantRecord, ttl_s=max_ttl_s
        )
        return cls(bucket, max_ttl_s, proxy)

    async def issue(self, request: GrantRequest) -> EgressGrant:
        """A new grant for `request`'s hosts, expiring after its TTL (at most the bucket's).

        Raises:
            InvalidInput: a declared host does not parse.
        """
        for host in request.hosts:
            try:
                Declared.parse(host)
            except Refused as error:
                raise InvalidInput(
                    f"{host!r} is not a declared host ({error.reason}): write it as name, "
                    "*.name or name:port"
                ) from None
        grant_id, secret = secrets.token_hex(16), secrets.token_urlsafe(32)
        ttl = min(request.ttl_s, self._max_ttl_s)
        expires_at = datetime.now(UTC) + timedelta(seconds=ttl)
        record = GrantRecord(
            grant_id=grant_id,
            secret_sha256=_digest(secret),
            expires_at=expires_at,
            **carried(request, _KEPT),
        )
        await self._bucket.put(grant_id, record)
        return EgressGrant(
            grant_id=grant_id, secret=secret, expires_at=expires_at, proxy=self.proxy
        )

    async def revoke(self, grant_id: str) -> None:
        """End a grant before its TTL: its call is over. An unknown grant is no error."""
        await self._bucket.delete(grant_id)

    async def check(self, grant_id: str, secret: str) -> GrantRecord:
        """The grant these credentials name, if they are its own and it has not expired.

        Raises:
            GrantRefused: unknown, expired, or the secret is not the grant's.
        """
        record: GrantRecord | None = None
        if len(grant_id) == 32 and all(c in "0123456789abcdef" for c in grant_id):
            found = await self._bucket.find(grant_id)
            record = None if found is None else found.value
        if record is None or record.expires_at <= datetime.now(UTC):
            raise GrantRefused(
                "the grant is unknown or has expired: each call gets its own grant, ask for a "
                "new one"
            )
        if not hmac.compare_digest(record.secret_sha256, _digest(secret)):
            raise GrantRefused("the grant's secret is wrong: use the secret issued with it")
        return record
