"""Durable approvals: an *ask* parks the call; a person's answer runs it once or declines it.

    pending ──approve──▶ running ──▶ done        (the call ran exactly once; its result kept)
       │                    └──(restart)──▶ uncertain   (never run again)
       └────decline───▶ declined                 (its result: a `declined` error)

The session waits while one of its calls is parked: a further call is refused until a
person answers. A session opened with `ask=False` (`--no-ask`) has nobody to ask, so a
call that would ask is refused at once (`needs_approval`).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime

import msgspec
from opentelemetry.trace import Link, get_current_span

from bastion.orchestrator.approvalstore import ApprovalStore
from bastion.orchestrator.audit import AuditLog
from bastion.orchestrator.catalogue import find_tool, tool_input_of
from bastion.orchestrator.gate import ask_policy, policy_request, target_for, touched_paths
from bastion.orchestrator.running import Runner
from bastion.orchestrator.skillrun import skill_tool
from bastion.orchestrator.skills import with_pre_approvals
from bastion.orchestrator.store import SessionStore
from bastion.orchestrator.upstream import prefetch_upstream
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.approvals import (
    ApprovalAnswer,
    ApprovalAnswered,
    ApprovalList,
    ApprovalQuery,
    ParkedCall,
)
from bastion.proto.errors import ErrorReply
from bastion.proto.policy import PolicyDecision, PreApproval, RuleCheck, RuleChecked
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.toolinput import SkillRunInput
from bastion.proto.tools import CallParked, CallResult, ToolCall, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.carry import carried
from bastion.shared.errors import BastionError, InvalidInput, RemoteError
from bastion.shared.telemetry import context_from_headers, headers_with_context, tracer

__all__ = ["Approvals", "how_to_answer"]

_SHOWN = ("call_id", "tool", "session_id", "request_id", "input", "decision")
"""What the agent is shown of its parked call, with the sentence saying how a person answers."""

logger = logging.getLogger(__name__)

Turn = Callable[[str], AbstractAsyncContextManager[None]]


def _now() -> datetime:
    return datetime.now(UTC)


def how_to_answer(session_id: str) -> str:
    """The sentence telling a person how to answer a session's parked call."""
    return (
        f"answer with `bastion agent continue {session_id} --approve` (`--always [RULE]` to "
        f"allow calls like it for the rest of the session) or `--decline WHY`"
    )


def _already(parked: ParkedCall) -> RemoteError:
    who = f" by {parked.answered_by}" if parked.answered_by else ""
    return RemoteError(
        codes.CONFLICT,
        f"approval request {parked.request_id} was already answered{who}: it is "
        f"{parked.state}, so this answer changes nothing",
    )


class Approvals:
    """Parks asks, lists them, and carries out a person's answer, each call at most once."""

    def __init__(
        self,
        client: Client,
        approvals: ApprovalStore,
        sessions: SessionStore,
        runner: Runner,
        *,
        turn: Turn,
        timeout_s: float,
        audit: AuditLog,
    ) -> None:
        self._audit = audit
        self._client = client
        self._approvals = approvals
        self._sessions = sessions
        self._runner = runner
        self._turn = turn
        self._timeout_s = timeout_s
        self._instance = secrets.token_hex(4)

    async def refuse_if_waiting(self, session: SessionInfo) -> None:
        """Refuse a call of a session that waits on a person (a stale mark is cleared).

        Raises:
            RemoteError: `waiting_for_approval`, naming the parked call.
        """
        if not session.waiting_for:
            return
        try:
            parked, _ = await self._approvals.get(session.waiting_for)
        except BastionError:
            parked = None
        if parked is not None and parked.state in ("pending", "running"):
            raise RemoteError(
                codes.WAITING_FOR_APPROVAL,
                f"session {session.session_id} waits for a person's answer to {parked.tool} "
                f"(request {parked.request_id}), so no other call runs until then: "
                + how_to_answer(session.session_id),
            )
        await self._release(session.session_id, session.waiting_for, count=False)

    async def ask(
        self,
        session: SessionInfo,
        call: ToolCall,
        call_id: str,
        tool: ToolSpec,
        decision: PolicyDecision,
    ) -> CallParked:
        """Park a call the policy asks about: the result that says so, and how to answer.

        Raises:
            RemoteError: `needs_approval`: nobody can be asked (`--no-ask`).
        """
        if not session.ask:
            raise RemoteError(
                codes.NEEDS_APPROVAL,
                f"needs a person's approval: {decision.reason}; this session was opened with "
                "--no-ask, so nobody can be asked and it did not run (raise --autonomy to let "
                "it run, or open the session without --no-ask to have a person asked)",
            )
        parked = ParkedCall(
            request_id=secrets.token_hex(8),
            session_id=session.session_id,
            tenant=session.tenant,
            agent=session.agent,
            call_id=call_id,
            tool=tool.name,
            input=call.input,
            decision=decision,
            created_at=_now(),
            traceparent=headers_with_context().get("traceparent", ""),
            stream=call.stream,
        )
        await self._approvals.create(parked)
        await self._audit.record(
            session,
            "approval",
            tool=tool.name,
            call_id=call_id,
            outcome="parked",
            rule=decision.rule,
            summary=f"request {parked.request_id}: {decision.reason}",
        )
        await self._sessions.update(
            session.session_id,
            lambda s: msgspec.structs.replace(s, waiting_for=parked.request_id),
        )
        because = " (because the session is tainted)" if decision.asked_because_tainted else ""
        return CallParked(
            **carried(parked, _SHOWN),
            message=f"{tool.name} waits for a person's approval{because}: {decision.reason}. "
            f"It is parked as request {parked.request_id}; a person can "
            + how_to_answer(session.session_id),
        )

    async def list(self, query: ApprovalQuery) -> ApprovalList:
        """The parked calls `query` asks for, oldest first."""
        found = [
            p
            for p in await self._approvals.every()
            if (query.session_id is None or p.session_id == query.session_id)
            and (query.tenant is None or p.tenant == query.tenant)
            and (query.every_state or p.state == "pending")
        ]
        return ApprovalList(approvals=tuple(found))

    async def answer(self, answer: ApprovalAnswer) -> ApprovalAnswered:
        """Carry out a person's answer; a call already answered is not touched again."""
        parked, _ = await self._approvals.get(answer.request_id)
        if parked.state not in ("pending", "running"):
            raise _already(parked)
        async with self._turn(parked.session_id):
            # Read again in the turn: a call `running` is finished by now, or settled as
            # `uncertain` if the turn was taken over from an orchestrator that died.
            parked, _ = await self._approvals.get(answer.request_id)
            if parked.state != "pending":
                raise _already(parked)
            if answer.approve:
                return await self._approve(parked, answer)
            reason = answer.reason.strip() or "no reason given"
            return await self._decline(parked, answer.by, reason)

    async def _decline(self, parked: ParkedCall, by: str, reason: str) -> ApprovalAnswered:
        result = ErrorReply(
            code=codes.DECLINED, message=f"a person ({by}) declined this call: {reason}"
        )
        declined = await self._approvals.move(
            parked.request_id,
            ("pending",),
            lambda p: msgspec.structs.replace(
                p,
                state="declined",
                answered_by=by,
                answered_at=_now(),
                answer=reason,
                result=result,
            ),
        )
        if declined is None:
            raise _already((await self._approvals.get(parked.request_id))[0])
        await self._audited(parked, "declined", by=by, summary=reason)
        await self._release(parked.session_id, parked.request_id)
        return ApprovalAnswered(approval=declined, result=result)

    async def _approve(self, parked: ParkedCall, answer: ApprovalAnswer) -> ApprovalAnswered:
        started = time.perf_counter()
        session_info, _ = await self._sessions.get(parked.session_id)
        if session_info.state == "closed":
            return await self._decline(parked, "bastion", "the session was closed")
        tool = find_tool(session_info, parked.tool)
        if tool is None:
            return await self._decline(parked, "bastion", f"the session has no {parked.tool}")
        tool_input = tool_input_of(tool, parked.input)
        # Listed anew for the approved call: the listing of its first sending is from before
        # the wait, and the one started now replaces it.
        await prefetch_upstream(self._client, session_info, tool, parked.call_id)
        tool = await skill_tool(self._client, session_info, tool, tool_input, self._timeout_s)
        touched = await touched_paths(self._client, session_info, tool_input, self._timeout_s)
        paths = touched.paths
        if answer.always and tool.effect == "spend":
            raise InvalidInput(
                f"{tool.name} spends money, and a person approves every payment: no rule lets "
                "the next one run unasked, so approve this one once (nothing was approved yet)"
            )
        rule = (
            await self._rule(tool, target_for(tool_input, paths), answer) if answer.always else ""
        )
        # The person approved the ask; an operator policy may have refused it since.
        now_decided = await ask_policy(
            self._client,
            policy_request(session_info, tool, tool_input, parked.input, _now(), paths=paths),
            self._timeout_s,
        )
        running = await self._approvals.move(
            parked.request_id,
            ("pending",),
            lambda p: msgspec.structs.replace(
                p,
                state="running",
                answered_by=answer.by,
                answered_at=_now(),
                rule=rule,
                runner=self._instance,
            ),
        )
        if running is None:
            raise _already((await self._approvals.get(parked.request_id))[0])
        result: CallResult
        if now_decided.outcome == "deny":
            result = ErrorReply(
                code=codes.DENIED,
                message=f"refused: {now_decided.reason} (a person approved it, but the policy "
                "refuses it now)",
            )
        elif touched.problem is not None:
            result = touched.problem.to_reply()
        else:
            if rule:
                granted = (
                    PreApproval(
                        rule=rule,
                        source=f"always ({answer.by})",
                        skill=tool_input.name if isinstance(tool_input, SkillRunInput) else "",
                    ),
                )
                session_info = await self._sessions.update(
                    parked.session_id, lambda s: with_pre_approvals(s, granted)
                )
            result = await self._run(
                session_info, tool, tool_input, parked=parked, by=answer.by, started=started
            )
        done = await self._approvals.move(
            parked.request_id,
            ("running", "uncertain"),
            lambda p: msgspec.structs.replace(p, state="done", result=result),
        )
        await self._audited(parked, "approved", by=answer.by, rule=rule)
        await self._audit.result(session_info, parked.call_id, parked.tool, result)
        await self._release(parked.session_id, parked.request_id)
        return ApprovalAnswered(approval=done or running, result=result)

    async def _run(
        self,
        session: SessionInfo,
        tool: ToolSpec,
        tool_input: msgspec.Struct,
        *,
        parked: ParkedCall,
        by: str,
        started: float,
    ) -> CallResult:
        decision = PolicyDecision(
            outcome="allow",
            reason=f"{by} approved it ({parked.decision.reason})",
            rule=f"approval:{parked.request_id}",
        )
        parked_span = get_current_span(context_from_headers({"traceparent": parked.traceparent}))
        links = [Link(parked_span.get_span_context())] if parked.traceparent else []
        try:
            # In the answer's trace, linked to the trace of the call that was parked.
            with tracer().start_as_current_span("orchestrator.approved_run", links=links):
                text = await self._runner.run(
                    session,
                    tool,
                    tool_input,
                    call_input=parked.input,
                    call_id=parked.call_id,
                    decision=decision,
                    stream=parked.stream,
                )
        except BastionError as error:
            return error.to_reply()
        return ToolOutput(
            call_id=parked.call_id,
            tool=tool.name,
            effect=tool.effect,
            text=text,
            decision=decision,
            duration_s=time.perf_counter() - started,
        )

    async def _audited(self, parked: ParkedCall, outcome: str, **fields: str) -> None:
        """An answer to a parked call, in the audit log."""
        session, _ = await self._sessions.get(parked.session_id)
        await self._audit.record(
            session,
            "approval",
            tool=parked.tool,
            call_id=parked.call_id,
            outcome=outcome,
            **fields,
        )

    async def _rule(self, tool: ToolSpec, target: str, answer: ApprovalAnswer) -> str:
        """The "always" rule: the one given, checked by the policy to cover this call (of
        `target`), or the policy's rule for exactly this call."""
        checked: RuleChecked = await request(
            self._client,
            subjects.POLICY_CHECK_RULE,
            RuleCheck(tool=tool.name, target=target, rule=answer.rule),
            RuleChecked,
            timeout_s=self._timeout_s,
        )
        if checked.problem:
            raise InvalidInput(f"{checked.problem} (nothing was approved yet)")
        return checked.rule

    async def _release(self, session_id: str, request_id: str, *, count: bool = True) -> None:
        """The session no longer waits on `request_id` (and counts the answered call)."""

        def change(s: SessionInfo) -> SessionInfo:
            waiting = "" if s.waiting_for == request_id else s.waiting_for
            return msgspec.structs.replace(s, waiting_for=waiting, calls=s.calls + int(count))

        await self._sessions.update(session_id, change)

    async def session_closed(self, session: SessionInfo) -> None:
        """A closed session's parked call is declined: nobody will run it now."""
        if not session.waiting_for:
            return
        await self._approvals.move(
            session.waiting_for,
            ("pending",),
            lambda p: msgspec.structs.replace(
                p,
                state="declined",
                answered_by="bastion",
                answered_at=_now(),
                answer="the session was closed",
                result=ErrorReply(code=codes.DECLINED, message="the session was closed"),
            ),
        )

    async def sessions_running(self) -> set[str]:
        """The sessions with a call found `running` (after a restart: maybe a dead one's)."""
        return {p.session_id for p in await self._approvals.every() if p.state == "running"}

    async def settle(self, session_id: str) -> None:
        """In the session's turn, taken from an orchestrator that stopped: a call of it found
        `running` may or may not have run, so it is marked `uncertain` and never run again;
        the session stops waiting on it."""
        for parked in await self._approvals.every():
            if parked.session_id != session_id or parked.state != "running":
                continue
            moved = await self._approvals.move(
                parked.request_id,
                ("running",),
                lambda p: msgspec.structs.replace(p, state="uncertain"),
            )
            if moved is not None:
                logger.warning(
                    "an approved call was running when its orchestrator stopped: uncertain",
                    extra={"session": parked.session_id, "request_id": parked.request_id},
                )
                await self._release(parked.session_id, parked.request_id)
