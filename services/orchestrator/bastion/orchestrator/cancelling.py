"""`session.<id>.cancel`: one running call of a session stopped, whichever replica runs it
(docs/architecture.md, "Cancelling a call").

Any replica may take the cancel (the endpoint is a queue group like `session.<id>.call`). It
looks the call up by its record (`callrecords`): none, or one already `done`, is answered
at once and nothing is done. A `running` one is told on `calls.cancel`, which every replica
of the orchestrator, the sandbox and the mcp service listens on: the orchestrator running
the call cancels its scope (it answers the call `cancelled`, recorded so), the sandbox
kills the command, the mcp service cancels the upstream request. The taker then waits a
little for the record to say the call ended, to answer `cancelled` rather than
`cancelling`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import anyio

from bastion.orchestrator.audit import AuditLog
from bastion.orchestrator.callrecords import CallRecords
from bastion.orchestrator.store import SessionStore
from bastion.proto import subjects
from bastion.proto.cancel import CallCancel, CancelAnswer, CancelCall, CancelOutcome
from bastion.shared.bus import Client
from bastion.shared.cancelling import Running
from bastion.shared.codec import encode

__all__ = ["Cancels"]

_POLL_S: Final = 0.05


@dataclass(frozen=True)
class Cancels:
    """Answers cancels of a session's calls: looks the call up, tells every replica."""

    client: Client
    store: SessionStore
    records: CallRecords
    running: Running
    audit: AuditLog
    wait_s: float = 5.0
    """How long the answer waits for a told call to end."""

    async def cancel(self, session_id: str, ask: CancelCall) -> CancelAnswer:
        """What cancelling `ask.call_id` of the session did.

        Raises:
            NotStored: the session does not exist.
        """
        session, _ = await self.store.get(session_id)
        state = await self.records.state(session_id, ask.call_id)
        if state is None and not self.running.runs(session_id, ask.call_id):
            return self._answer(
                session_id,
                ask,
                "unknown",
                f"session {session_id} has no call {ask.call_id!r} that runs or ran: "
                "nothing was cancelled",
            )
        if state == "done":
            return self._answer(
                session_id,
                ask,
                "ended",
                f"call {ask.call_id!r} had already ended: nothing was cancelled",
            )
        told = CallCancel(session_id=session_id, call_id=ask.call_id, by=ask.by)
        self.running.cancel(told)  # this replica's part at once; the others are told
        await self.client.publish(subjects.CALLS_CANCEL, encode(told))
        await self.audit.record(session, "cancel", call_id=ask.call_id, by=ask.by)
        with anyio.move_on_after(self.wait_s):
            await self._ended(session_id, ask.call_id)
            return self._answer(
                session_id, ask, "cancelled", f"call {ask.call_id!r} was cancelled by {ask.by}"
            )
        return self._answer(
            session_id,
            ask,
            "cancelling",
            f"call {ask.call_id!r} was told to stop (by {ask.by}) and had not stopped within "
            f"{self.wait_s:g} s: its answer will say when it has",
        )

    async def _ended(self, session_id: str, call_id: str) -> None:
        """Return once the call runs here no more and its record is not `running`."""
        while True:
            if (
                not self.running.runs(session_id, call_id)
                and await self.records.state(session_id, call_id) != "running"
            ):
                return
            await anyio.sleep(_POLL_S)

    @staticmethod
    def _answer(
        session_id: str, ask: CancelCall, outcome: CancelOutcome, message: str
    ) -> CancelAnswer:
        return CancelAnswer(
            session_id=session_id, call_id=ask.call_id, outcome=outcome, message=message
        )
