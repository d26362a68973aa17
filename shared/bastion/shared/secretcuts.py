"""Which secret values a session's replies must have cut out: its own leases, and every value
of its tenant's. The sandbox service cuts its commands' and file tools' answers with it, the
mcp service its upstream servers' answers.

The service's lease key and the lease itself are `bastion.shared.leasing`'s; the values
are in clear only in this process (and in the one command's or server's environment). A
value one call leased may be written anywhere by that command (a file in the workspace,
read by the tenant's next session, which never leased it), so the redactor of a session's
replies cuts out:

- what the session leased (in memory until it is released);
- what this process leased for the tenant (in memory for its life: a value replaced in the
  vault since is still cut);
- every value the tenant has had in the vault since this process first asked, which the
  vault gives sealed to this service's key (`vault.redaction`), asked again at most every
  `refresh_s` seconds. When the vault cannot answer, what it gave before (and the two
  above) is used, and it is asked again after `RETRY_S`.

A large text is cut in a worker thread, in its tenant's turn (`bastion.shared.cutturns`):
`cutter` gives a session's redactor with the turns it waits for.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Final, TypeVar

import anyio
import anyio.to_thread

from bastion.shared.cutturns import Cutter, CutTurns
from bastion.shared.errors import BastionError
from bastion.shared.leasing import LeaseClient
from bastion.shared.redaction import Redactor

__all__ = ["MAX_SESSIONS", "REFRESH_S", "RETRY_S", "SecretCuts"]

logger = logging.getLogger(__name__)

MAX_SESSIONS: Final = 4096
MAX_TENANTS: Final = 4096
MAX_REDACTORS: Final = 256
MAX_REDACTOR_CHARS: Final = 16 * 1024 * 1024
"""The most characters of forms the kept redactors are built of together (an automaton takes
some tens of bytes a character): the least recently used go first, the last one always
stays."""
REFRESH_S: Final = 30.0
"""How long the vault's set of a tenant's values is used before it is asked again, unless
the service says otherwise."""
RETRY_S: Final = 5.0
"""How long after the vault failed to answer it is asked again."""

Pair = tuple[str, str]
K = TypeVar("K")
V = TypeVar("V")


def _bounded_put(table: OrderedDict[K, V], key: K, value: V, bound: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > bound:
        table.popitem(last=False)


class SecretCuts:
    """What each session leased, what each tenant holds, and the redactors cutting them."""

    def __init__(self, leases: LeaseClient | None = None, refresh_s: float = REFRESH_S) -> None:
        self._leases = leases
        self._refresh_s = refresh_s
        self._leased: OrderedDict[str, set[Pair]] = OrderedDict()
        self._tenant_leased: OrderedDict[str, set[Pair]] = OrderedDict()
        self._vault: OrderedDict[str, tuple[float, frozenset[Pair]]] = OrderedDict()
        self._locks: OrderedDict[str, anyio.Lock] = OrderedDict()
        self._redactors: OrderedDict[frozenset[Pair], Redactor] = OrderedDict()
        self.turns = CutTurns()
        """Every tenant's turns at cutting large texts."""

    def remember(self, tenant: str, session_id: str, pairs: list[Pair]) -> None:
        """Keep what a call of `session_id` just leased, for it and for its tenant."""
        held = self._leased.get(session_id, set()) | set(pairs)
        _bounded_put(self._leased, session_id, held, MAX_SESSIONS)
        mine = self._tenant_leased.get(tenant, set()) | set(pairs)
        _bounded_put(self._tenant_leased, tenant, mine, MAX_TENANTS)

    async def pairs(self, tenant: str, session_id: str) -> frozenset[Pair]:
        """Every (name, value) a reply of `session_id` of `tenant` must have cut out."""
        found = set(self._leased.get(session_id, ()))
        found |= self._tenant_leased.get(tenant, set())
        found |= await self._vault_values(tenant, session_id)
        return frozenset(found)

    async def redactor(
        self, tenant: str, session_id: str, extra: Iterable[Pair] = ()
    ) -> Redactor | None:
        """The redactor of `session_id`'s replies (and of the `extra` pairs, values given
        otherwise), or None when there is nothing to cut."""
        found = await self.pairs(tenant, session_id) | frozenset(extra)
        if not found:
            return None
        redactor = self._redactors.get(found)
        if redactor is None:
            # Building takes time in proportion to the values (a second for fifty of 4 KiB):
            # in a worker thread, which the automaton's building lets run beside the loop.
            redactor = await anyio.to_thread.run_sync(Redactor, sorted(found))
        _bounded_put(self._redactors, found, redactor, MAX_REDACTORS)
        self._bound_redactors()
        return redactor

    @property
    def kept_size(self) -> int:
        """The characters of forms the kept redactors are built of together."""
        return sum(redactor.size for redactor in self._redactors.values())

    def _bound_redactors(self) -> None:
        total = self.kept_size
        while total > MAX_REDACTOR_CHARS and len(self._redactors) > 1:
            total -= self._redactors.popitem(last=False)[1].size

    async def cutter(self, tenant: str, session_id: str, extra: Iterable[Pair] = ()) -> Cutter:
        """The cuts of `session_id`'s replies (and of the `extra` pairs), in `tenant`'s
        turns."""
        return Cutter(await self.redactor(tenant, session_id, extra), tenant, self.turns)

    def forget(self, session_id: str) -> None:
        """The session is closed: what it leased stays cut for its tenant only."""
        self._leased.pop(session_id, None)

    async def _vault_values(self, tenant: str, session_id: str) -> frozenset[Pair]:
        if self._leases is None:
            return frozenset()
        due, held = self._vault.get(tenant, (0.0, frozenset[Pair]()))
        if time.monotonic() < due:  # fresh: no lock (and no turn of the event loop) to take
            return held
        lock = self._locks.get(tenant)
        if lock is None:
            lock = anyio.Lock()
            _bounded_put(self._locks, tenant, lock, MAX_TENANTS)
        async with lock:
            now = time.monotonic()
            due, held = self._vault.get(tenant, (0.0, frozenset[Pair]()))
            if now < due:
                return held
            try:
                given = await self._leases.redaction_values(tenant, session_id)
            except BastionError as error:
                logger.warning(
                    "the vault gave no redaction set: replies are cut of the values known",
                    extra={"tenant": tenant, "code": error.code},
                )
                _bounded_put(self._vault, tenant, (now + RETRY_S, held), MAX_TENANTS)
                return held
            known = held | frozenset(given)  # a value removed or replaced since stays cut
            _bounded_put(self._vault, tenant, (now + self._refresh_s, known), MAX_TENANTS)
            return known
