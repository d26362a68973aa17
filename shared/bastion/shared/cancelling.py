"""The calls this process runs a part of, by session and call id, and stopping one when
`calls.cancel` says so (docs/architecture.md, "Cancelling a call").

The orchestrator, the sandbox and the mcp service each run a call's part inside
`Running.scope`; every replica of each listens on `calls.cancel` (`listen`), and the one
that runs the call named cancels its scope. A replica that runs nothing of it ignores it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

import anyio
from nats.aio.msg import Msg

from bastion.proto import subjects
from bastion.proto.cancel import CallCancel
from bastion.shared.bus import Client
from bastion.shared.codec import decode
from bastion.shared.errors import BadRequest, Cancelled

__all__ = ["KEPT_S", "Cancellable", "Running", "listen"]

logger = logging.getLogger(__name__)

KEPT_S: Final = 60.0
"""How long a cancel told before the call's part here began is kept for it."""


@dataclass
class Cancellable:
    """One running part of a call: its scope, and who cancelled it once someone did."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    by: str = ""

    @property
    def cancelled(self) -> bool:
        return bool(self.by)

    def error(self, what: str) -> Cancelled:
        """The typed error of `what` (`this shell call`) stopped by whoever cancelled it."""
        return Cancelled(
            f"{what} was cancelled by {self.by} while it ran; what it did before it stopped "
            "stays done (look at the workspace or ask the tool's server), and it is not made "
            "again under this call id: make a new call if it is still needed"
        )


class Running:
    """The calls this process runs a part of now, by (session id, call id), and the cancels
    told for a call before its part here began (kept `KEPT_S`: that part is cancelled as
    it begins)."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str], list[Cancellable]] = {}
        self._told: dict[tuple[str, str], tuple[str, float]] = {}

    @contextmanager
    def scope(self, session_id: str, call_id: str) -> Iterator[Cancellable]:
        """Run the block as part of the call; a cancel of it cancels the block, which
        then ends quietly with `cancelled` set (the caller raises `error`)."""
        key = (session_id, call_id)
        running = Cancellable()
        self._calls.setdefault(key, []).append(running)
        told = self._told.pop(key, None)
        if told is not None and told[1] > time.monotonic():
            running.by = told[0]
            running.scope.cancel()
        try:
            with running.scope:
                yield running
        finally:
            here = self._calls.get(key, [])
            if running in here:
                here.remove(running)
            if not here:
                self._calls.pop(key, None)

    def runs(self, session_id: str, call_id: str) -> bool:
        return (session_id, call_id) in self._calls

    def cancel(self, told: CallCancel) -> bool:
        """Cancel every part of the call this process runs; whether there was one. Without
        one, the cancel is kept a while: a part that begins meanwhile is cancelled."""
        key = (told.session_id, told.call_id)
        found = self._calls.get(key, [])
        for running in found:
            running.by = running.by or told.by
            running.scope.cancel()
        if not found:
            now = time.monotonic()
            self._told = {k: v for k, v in self._told.items() if v[1] > now}
            self._told[key] = (told.by, now + KEPT_S)
        return bool(found)


async def listen(client: Client, running: Running) -> None:
    """Subscribe to `calls.cancel`: each cancel told there stops what `running` has of it.
    The subscription lasts as long as the connection."""

    async def told(msg: Msg) -> None:
        try:
            cancel = decode(msg.data, CallCancel)
        except BadRequest:
            logger.warning("a cancel that is not a CallCancel was ignored")
            return
        if running.cancel(cancel):
            logger.info("cancelled a call", extra={"session": cancel.session_id, "by": cancel.by})

    await client.subscribe(subjects.CALLS_CANCEL, cb=told)
