"""Leases: one call's secrets, sealed to the sandbox service, every read in the audit log;
and redaction sets: all of a tenant's values, sealed the same way, only to cut them out.

A lease is refused whole if any name is not the tenant's, if the recipient key is not one
the operator allowed (`BASTION_VAULT_LEASE_KEYS`, when set), if the NATS server stamped the
request as coming from a caller that may not lease (`BASTION_VAULT_LEASE_CALLERS`), or
if its audit records cannot be stored: a read nobody can account for does not happen. A
redaction set is given on the same terms, to the same callers and keys (who may lease any
of the tenant's secrets by name anyway), and is audited as one read of every value in it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping

from nats.js.client import JetStreamContext

from bastion.proto import errors as codes
from bastion.proto.vault import (
    MAX_LEASE_NAMES,
    Lease,
    LeasedValues,
    LeaseRequest,
    RedactionRequest,
    RedactionValues,
)
from bastion.shared.audit import audit_record, store_record
from bastion.shared.codec import encode
from bastion.shared.errors import BastionError, InvalidInput, NotFound
from bastion.shared.leasing import lease_context, redaction_context
from bastion.shared.sealing import seal
from bastion.vault.keeper import Keeper

__all__ = [
    "CallerRefused",
    "Leases",
    "lease_context",
    "parse_nkey_names",
    "requester",
    "stamped_caller",
]


class CallerRefused(BastionError):
    """The server says the request came from an account or user that may not lease."""

    code = codes.DENIED


def _request_info(headers: Mapping[str, str]) -> dict[str, object]:
    info = headers.get("Nats-Request-Info")
    if not info:
        return {}
    try:
        stamped = json.loads(info)
    except ValueError:
        return {"acc": "?"}  # a header that is there but unreadable names no allowed account
    return stamped if isinstance(stamped, dict) else {"acc": "?"}


def parse_nkey_names(pairs: str) -> dict[str, str]:
    """`BASTION_VAULT_CALLER_NKEYS` (`NKEY=user,…`) as a map from nkey to user name."""
    found = (pair.strip().partition("=") for pair in pairs.split(","))
    return {nkey.strip(): user.strip() for nkey, _, user in found if nkey.strip() and user.strip()}


def stamped_caller(
    headers: Mapping[str, str], names: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """The account and user (`""` unless the import shares it; an nkey user's name from
    `names`) the server stamped on a request that crossed accounts, else None."""
    info = _request_info(headers)
    if not info:
        return None
    user = str(info.get("user") or "")
    return str(info.get("acc") or "?"), (names or {}).get(user, user)


def requester(
    headers: Mapping[str, str], public_key: bytes, names: Mapping[str, str] | None = None
) -> str:
    """Who asked, as far as the bus says: the NATS account and user when the server stamps
    them (across accounts), and always the recipient key's fingerprint."""
    fingerprint = hashlib.sha256(public_key).hexdigest()[:16]
    who = f"key {fingerprint}"
    stamped = stamped_caller(headers, names)
    if stamped is not None and _request_info(headers).get("acc"):
        who = f"{stamped[0]}/{stamped[1] or '?'} {who}"
    return who


class Leases:
    """Answers `vault.lease`."""

    def __init__(
        self,
        keeper: Keeper,
        js: JetStreamContext,
        allowed: frozenset[bytes] = frozenset(),
        callers: frozenset[str] = frozenset(),
        names: Mapping[str, str] | None = None,
    ) -> None:
        self._keeper = keeper
        self._js = js
        self._allowed = allowed
        self._callers = callers
        self._names = dict(names or {})

    async def lease(self, request: LeaseRequest, headers: Mapping[str, str]) -> Lease:
        if len(request.public_key) != 32:
            raise InvalidInput(
                "a lease request needs the sandbox service's X25519 public key (32 bytes)"
            )
        if len(request.names) > MAX_LEASE_NAMES:
            raise InvalidInput(
                f"a call may lease at most {MAX_LEASE_NAMES} secrets; it asked for "
                f"{len(request.names)}"
            )
        who = requester(headers, request.public_key, self._names)
        try:
            self._check_recipient(request.public_key, headers)
            values = [
                (name, await self._keeper.read(request.tenant, name)) for name in request.names
            ]
        except BastionError as refused:
            await self._audit(request, who, "refused", ", ".join(request.names), refused.code)
            raise
        for name in request.names:
            await self._audit(request, who, "leased", name)
        sealed = seal(
            request.public_key,
            encode(LeasedValues(values=tuple(values))),
            lease_context(request.tenant, request.session_id, request.call_id),
        )
        return Lease(names=request.names, sealed=sealed)

    def _check_recipient(self, public_key: bytes, headers: Mapping[str, str]) -> None:
        """Refuse a caller the server says may not lease, and a key the operator did not list.

        Raises:
            CallerRefused: the stamped caller is not in `BASTION_VAULT_LEASE_CALLERS`.
            InvalidInput: the key is not in `BASTION_VAULT_LEASE_KEYS` (when it is set).
        """
        caller = stamped_caller(headers, self._names)
        # The server stamps (replacing a client's) only requests that cross accounts, as
        # every lease does when the vault has an account of its own; within one account the
        # header is whatever the client sent, and what keeps others off `vault.lease` and
        # `vault.redaction` is their subject permissions.
        if caller is not None and not self._callers & {caller[0], "/".join(caller)}:
            raise CallerRefused(
                f"{'/'.join(caller)[:80]!r} may not lease secrets: only the callers in "
                "BASTION_VAULT_LEASE_CALLERS (the sandbox and mcp services) may"
            )
        if self._allowed and public_key not in self._allowed:
            raise InvalidInput(
                "this key may not receive leases: the vault seals only to the keys in "
                "BASTION_VAULT_LEASE_KEYS (the sandbox service's)"
            )

    async def redaction(
        self, request: RedactionRequest, headers: Mapping[str, str]
    ) -> RedactionValues:
        """All of the tenant's values, sealed to the caller, to cut out of its replies."""
        if len(request.public_key) != 32:
            raise InvalidInput(
                "a redaction request needs the service's X25519 public key (32 bytes)"
            )
        audit = functools.partial(
            self._record,
            request.tenant,
            request.session_id,
            tool="vault.redaction",
            who=requester(headers, request.public_key, self._names),
        )
        try:
            self._check_recipient(request.public_key, headers)
            values = []
            for info in await self._keeper.list(request.tenant):
                try:
                    values.append((info.name, await self._keeper.read(request.tenant, info.name)))
                except NotFound:
                    continue  # removed since it was listed: nothing of it to cut
            names = [name for name, _ in values]
        except BastionError as refused:
            await audit(outcome="refused", summary=f"the redaction set refused ({refused.code})")
            raise
        await audit(
            outcome="redaction",
            summary=f"secrets {', '.join(names) or '(none)'} read to cut them out of replies",
        )
        sealed = seal(
            request.public_key,
            encode(LeasedValues(values=tuple(values))),
            redaction_context(request.tenant, request.session_id),
        )
        return RedactionValues(names=tuple(names), sealed=sealed)

    async def _audit(
        self, request: LeaseRequest, who: str, outcome: str, names: str, code: str = ""
    ) -> None:
        summary = (
            f"secret {names} read for the call"
            if outcome == "leased"
            else (f"secrets {names} refused ({code})")
        )
        await self._record(
            request.tenant,
            request.session_id,
            tool="vault.lease",
            who=who,
            outcome=outcome,
            summary=summary,
            call_id=request.call_id,
        )

    async def _record(
        self,
        tenant: str,
        session_id: str,
        *,
        tool: str,
        who: str,
        outcome: str,
        summary: str,
        call_id: str = "",
    ) -> None:
        await store_record(
            self._js,
            audit_record(
                "secret_read",
                session_id,
                tenant,
                tool=tool,
                call_id=call_id,
                outcome=outcome,
                summary=summary[:200],
                by=who[:128],
            ),
        )
