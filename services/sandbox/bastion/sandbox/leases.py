"""What each session leased from the vault, so that its replies have the values cut out.

The service's key (`BASTION_SANDBOX_KEY_FILE`) and the lease itself are
`bastion.shared.leasing`'s; the values are in clear only in this process and in the one
command's environment. Each session's leased values are remembered (in memory, until the
session is released) so that every reply of that session, file tools' too, has them cut out.
"""

from __future__ import annotations

from bastion.shared.redaction import Redactor

__all__ = ["SessionSecrets"]

MAX_SESSIONS = 4096


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
