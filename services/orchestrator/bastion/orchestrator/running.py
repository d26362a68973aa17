"""Running an allowed (or approved) call, and what its result changes in the session.

Both paths that run a call — one the policy allows, one a person approved — come here,
so taint, a skill's pre-approvals and the call's record by call id (`callrecords`: it runs
once however often it is sent) are kept the same way for both.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from bastion.orchestrator.audit import AuditLog
from bastion.orchestrator.callrecords import CallRecords
from bastion.orchestrator.hooks import Hooks
from bastion.orchestrator.journal import Journal
from bastion.orchestrator.registry import route_of
from bastion.orchestrator.store import SessionStore
from bastion.orchestrator.taint import from_outside, tainted_by
from bastion.orchestrator.toolcall import Call
from bastion.proto import errors as codes
from bastion.proto.errors import ErrorReply
from bastion.proto.policy import PolicyDecision
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.shared.bus import Client
from bastion.shared.cancelling import Running
from bastion.shared.errors import BastionError, RemoteError
from bastion.shared.telemetry import span

__all__ = ["Runner"]


@dataclass(frozen=True)
class Runner:
    """Runs a call on the service that owns it — hooks, audit and journal around it — then
    records taint and skills' rules."""

    client: Client
    store: SessionStore
    timeout_s: float
    taint_s: float
    _: KW_ONLY
    journal: Journal
    audit: AuditLog
    hooks: Hooks
    records: CallRecords
    running: Running = field(default_factory=Running)
    """The calls running here, each cancelled by `calls.cancel` (`cancelling`)."""
    ask_again_s: float = 0.0
    """`BASTION_TASKS_ASK_S`: see `Call.ask_again_s`."""

    async def run(
        self,
        session: SessionInfo,
        tool: ToolSpec,
        tool_input: msgspec.Struct,
        *,
        call_input: dict[str, Any],
        call_id: str,
        decision: PolicyDecision,
        alone: bool = True,
        stream: bool = False,
        parent_call_id: str = "",
        record: bool = True,
    ) -> str:
        """The call's text, in the order of docs/architecture.md §2: before-tool hooks (which
        may block), the audit record, the call itself through the journal, then after-tool
        hooks; its outcome is kept under its call id, and a call id that has one is answered
        from it. A nested call (`parent_call_id`: the run_code call whose program made it)
        is audited under its parent.

        Raises:
            UncertainCall: the call got no answer (journaled or not, it is not made again).
            NeedsTurnAlone: in a shared turn (not `alone`), its call id's first sending
                still runs.
        """
        started = await self.records.start(session, tool, call_id, decision) if record else None
        if record and started is None:  # sent again with its call id: it ran, or runs, once
            recorded = await self.records.recall(session.session_id, call_id, alone=alone)
            if isinstance(recorded, ErrorReply):
                raise RemoteError(recorded.code, recorded.message)
            assert recorded is not None
            return recorded.text
        try:
            with span("orchestrator.hooks.before_tool"):
                await self.hooks.before_tool(session, tool.name, call_input, decision.outcome)
            with span("orchestrator.audit"):
                await self.audit.call(
                    session, call_id, tool.name, call_input, parent_call_id=parent_call_id
                )
            with span("orchestrator.journal.run"):
                text = await self.journal.run(
                    session,
                    tool,
                    tool_input,
                    call_id,
                    decision=decision,
                    make=lambda: self._execute(session, tool, tool_input, call_id, stream),
                )
            with span("orchestrator.hooks.after_tool"):
                text = await self.hooks.after_tool(session, tool.name, call_input, text)
        except BastionError as error:
            if started is not None and error.code in (codes.UNCERTAIN, codes.CANCELLED):
                await self.records.finish(started, error=error.to_reply())
            elif started is not None:  # answered with an error: nothing changed, made again
                await self.records.drop(started)
            raise
        if started is not None:
            await self.records.finish(started, text=text)
        return text

    async def _execute(
        self,
        session: SessionInfo,
        tool: ToolSpec,
        tool_input: msgspec.Struct,
        call_id: str,
        stream: bool = False,
    ) -> str:
        """The call's text, from the service its route names; a result from outside taints
        the session even when it failed, since what came back (an error page, a command's
        output) may carry the outside."""
        call = Call(
            self.client,
            self.store,
            session,
            tool,
            call_id,
            self.timeout_s,
            stream,
            self.ask_again_s,
        )
        with span("orchestrator.execute", tool=tool.name):
            try:
                with self.running.scope(session.session_id, call_id) as running:
                    return await route_of(tool).run(call, tool_input)
                raise running.error(f"this {tool.name} call")
            finally:
                if from_outside(tool):
                    now = datetime.now(UTC)
                    await self.store.update(
                        session.session_id, lambda s: tainted_by(s, now, self.taint_s)
                    )
