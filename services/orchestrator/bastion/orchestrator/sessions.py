"""Session actors: open, get, close, and call — a session's reads run side by side (up to
`BASTION_SESSION_PARALLEL_READS`), its other calls one at a time, in the order they came,
across every orchestrator replica (`callorder` in this process, the turn in `turns`)."""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial

import msgspec

from bastion.orchestrator.approvals import Approvals
from bastion.orchestrator.approvalstore import ApprovalStore
from bastion.orchestrator.audit import AuditLog, error_code_of
from bastion.orchestrator.callorder import CallOrder, NeedsTurnAlone, Place
from bastion.orchestrator.callrecords import CallRecords
from bastion.orchestrator.catalogue import (
    catalogue_for,
    find_tool,
    input_type_of,
    is_journaled,
    tool_input_of,
)
from bastion.orchestrator.gate import WHOSE, ask_policy, policy_request, touched_paths
from bastion.orchestrator.hooks import Hooks
from bastion.orchestrator.journal import Journal
from bastion.orchestrator.nested import NestedCalls
from bastion.orchestrator.opencaps import OpenCaps
from bastion.orchestrator.quota import QuotaUnavailable, RateLimited, TenantRates
from bastion.orchestrator.registry import parents_calls
from bastion.orchestrator.running import Runner
from bastion.orchestrator.skillrun import skill_tool
from bastion.orchestrator.store import SessionStore
from bastion.orchestrator.turns import Turns, TurnTimeout
from bastion.orchestrator.upstream import offer_upstream, prefetch_upstream
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.events import CallDecided, CallFinished, SessionClosed, SessionOpened
from bastion.proto.sandbox import (
    Limits,
    SandboxCheck,
    SandboxReady,
    SandboxRelease,
    SandboxReleased,
)
from bastion.proto.session import OpenSession, SessionInfo, SessionLimits
from bastion.proto.tools import CallParked, CallResult, ToolCall, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.cancelling import Running
from bastion.shared.carry import carried
from bastion.shared.codec import describe_decode_error, encode
from bastion.shared.deadlines import call_wait_s
from bastion.shared.errors import BastionError, InvalidInput, RemoteError
from bastion.shared.metrics import call_duration, calls
from bastion.shared.telemetry import annotate, headers_with_context, span

__all__ = ["Sessions"]

_KEPT = (
    "tenant",
    "agent",
    "autonomy",
    "workspace",
    "shell",
    "sandbox",
    "network",
    "read_only_dirs",
    "skills_dir",
    "skill_approvals",
    "ask",
    "mcp",
    "token_id",
    "elicits",
)
"""What a session keeps of the ask that opened it, as asked."""
_CHECKED = ("workspace", "network", "read_only_dirs", "skills_dir")
"""What of a session's ask its sandbox is checked for (with its backend) before it opens."""
_CATALOGUED = ("workspace", "shell", "network", "skills_dir", "web", "sandbox")
"""What of a session's ask decides the tools it is offered."""

_SEEN = 4096
"""How many sessions' tenant and tools an instance keeps in memory (the oldest forgotten)."""

logger = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def session_limits(asked: SessionLimits) -> Limits:
    """The defaults, with what the session asked for in their place."""
    given = {k: v for k, v in msgspec.structs.asdict(asked).items() if v is not None}
    return msgspec.structs.replace(Limits(), **given)


def _how_to_get(session: SessionInfo, tool: str) -> str:
    """How a session that lacks `tool` would have it, when it is one a session opens with."""
    if tool == "shell" and session.workspace is None:
        return " (a shell needs a workspace: open the session with --workspace DIR --shell)"
    if tool == "shell":
        return " (the session was opened without a shell: open one with --shell)"
    if tool == "fetch_url":
        return " (the session was opened without the web: open one with --web)"
    return ""


def _refuse_unformed(ask: OpenSession) -> None:
    """Refuse a workspace that is not an absolute path, and a shell with no workspace."""
    if ask.workspace is not None and not ask.workspace.startswith("/"):
        raise InvalidInput(
            f"the workspace {ask.workspace} is not an absolute path: give its full path"
        )
    if ask.workspace is None and ask.shell:
        raise InvalidInput("a shell needs a workspace: give one with --workspace DIR")


class Sessions:
    """The actors of every session this orchestrator is asked about, backed by the store."""

    def __init__(
        self,
        client: Client,
        store: SessionStore,
        timeout_s: float,
        approvals: ApprovalStore,
        taint_s: float,
        *,
        journal: Journal,
        audit: AuditLog,
        hooks: Hooks,
        turns: Turns,
        rates: TenantRates,
        caps: OpenCaps,
        records: CallRecords,
        search: bool = False,
        parallel_reads: int = 8,
        tasks_ask_s: float = 0.0,
    ) -> None:
        self._client = client
        self._search = search
        self._store = store
        self._timeout_s = timeout_s
        self._journal = journal
        self._audit = audit
        self._turns = turns
        self._rates = rates
        self._caps = caps
        self._records = records
        self._parallel_reads = parallel_reads
        self._orders: dict[str, CallOrder] = {}
        self._seen: dict[str, SessionInfo] = {}
        self._calls_in: Counter[tuple[str, str]] = Counter()
        """(session, call id) of the calls here now: one sent again while its first
        sending is still here is made alone, after it."""
        self.running = Running()
        """The calls running here, by session and call id: what a cancel stops."""
        self._runner = Runner(
            client,
            store,
            timeout_s,
            taint_s,
            journal=journal,
            audit=audit,
            hooks=hooks,
            records=records,
            running=self.running,
            ask_again_s=tasks_ask_s,
        )
        self.nested = NestedCalls(
            client,
            store,
            timeout_s,
            audit=audit,
            runner=self._runner,
            records=records,
            rates=rates,
        )
        """The calls `run_code` programs make, inside their run_code call's turn."""
        self.approvals = Approvals(
            client,
            approvals,
            store,
            self._runner,
            turn=self._turn,
            timeout_s=timeout_s,
            audit=audit,
        )

    def _enter(self, session_id: str) -> tuple[CallOrder, Place]:
        """A place in the session's line here, taken before anything is awaited."""
        order = self._orders.setdefault(session_id, CallOrder(self._parallel_reads))
        return order, order.enter()

    def _leave(self, session_id: str, order: CallOrder, place: Place) -> None:
        order.leave(place)
        if order.idle and self._orders.get(session_id) is order:
            del self._orders[session_id]

    @asynccontextmanager
    async def _turn(
        self,
        session_id: str,
        wait_s: float | None = None,
        *,
        at: tuple[CallOrder, Place] | None = None,
        shared: bool = False,
    ) -> AsyncIterator[None]:
        """Hold the session's turn from its place in line `at` (by default, a new one at
        the back): alone, or `shared` beside other reads; in the order the calls arrived
        here, across replicas; a turn taken over from a dead holder is settled first.
        Others' turn is waited for up to `wait_s` (by default, the turns' own). A read
        that raises `NeedsTurnAlone` is first in line again, to hold the turn alone."""
        order, place = self._enter(session_id) if at is None else at
        again = False
        try:
            await order.wait(place, shared=shared)
            async with self._turns.hold(session_id, wait_s=wait_s, shared=shared) as taken_over:
                if taken_over:
                    await self.approvals.settle(session_id)
                yield
        except NeedsTurnAlone:
            again = True
            order.again_exclusive(place)
            raise
        finally:
            if not again:
                self._leave(session_id, order, place)

    async def recover(self) -> None:
        """At start: settle each session with a call found `running` whose turn is free (its
        orchestrator stopped and gave it back). A turn held now is a live replica's, which
        finishes the call, or a dead one's, settled by whoever takes it over."""
        for session_id in await self.approvals.sessions_running():
            try:
                async with self._turns.hold(session_id, wait_s=0):
                    await self.approvals.settle(session_id)
            except TurnTimeout:
                continue

    async def open(self, ask: OpenSession) -> SessionInfo:
        """Open a session as `ask` says, within its tenant's and token's caps on open
        sessions (counted before its sandbox is checked: a refusal costs no sandbox)."""
        _refuse_unformed(ask)
        session_id = secrets.token_hex(8)
        async with self._caps.opening(session_id, ask.tenant, ask.token_id):
            session = await self._opened(session_id, ask)
        await self._publish(
            "session_opened",
            session.tenant,
            SessionOpened(at=session.opened_at, **carried(session, WHOSE)),
        )
        logger.info("session opened", extra={"session": session.session_id})
        return session

    async def check(self, ask: OpenSession) -> None:
        """Refuse `ask` as `open` would (its form, its sandbox), opening nothing: how a
        front-door token's profile is checked when it is created.

        Raises:
            BastionError: the refusal `open` would answer with.
        """
        _refuse_unformed(ask)
        await self._check_sandbox(ask)

    async def _check_sandbox(self, ask: OpenSession) -> None:
        if ask.workspace is not None:
            await request(
                self._client,
                subjects.SANDBOX_CHECK,
                SandboxCheck(backend=ask.sandbox, **carried(ask, _CHECKED)),
                SandboxReady,
                timeout_s=self._timeout_s,
            )

    async def _opened(self, session_id: str, ask: OpenSession) -> SessionInfo:
        """The session `ask` is for, its sandbox checked and its upstream tools offered,
        stored."""
        await self._check_sandbox(ask)
        upstream, notices = await offer_upstream(
            self._client,
            ask.tenant,
            session_id,
            ask.mcp,
            self._timeout_s,
            can_ask=ask.elicits,
            skills_dir=ask.skills_dir or "",
        )
        session = SessionInfo(
            session_id=session_id,
            state="open",
            opened_at=_now(),
            tools=catalogue_for(search=self._search, **carried(ask, _CATALOGUED)) + upstream,
            limits=session_limits(ask.limits),
            notices=notices,
            **carried(ask, _KEPT),
        )
        await self._store.create(session)
        return session

    async def get(self, session_id: str) -> SessionInfo:
        session, _ = await self._store.get(session_id)
        return session

    async def after_calls(self, session_id: str) -> SessionInfo:
        """The session once the calls it runs now have ended (its turn taken and given
        back): what a run's end is told after, so its hooks see what the run left."""
        async with self._turn(session_id):
            return await self.get(session_id)

    async def _as_opened(self, session_id: str) -> SessionInfo:
        """The session as read once by this instance: for what never changes once it is
        open (its tenant, its tools), so that a call reads the store once, in its turn."""
        session = self._seen.get(session_id)
        if session is None:
            session = await self.get(session_id)
            if len(self._seen) >= _SEEN:
                del self._seen[next(iter(self._seen))]
            self._seen[session_id] = session
        return session

    async def close(self, session_id: str) -> SessionInfo:
        async with self._turn(session_id):
            session = await self.get(session_id)
            if session.state == "closed":
                return session
            closed = await self._store.update(
                session_id,
                lambda s: msgspec.structs.replace(s, state="closed", closed_at=_now()),
            )
        self._seen.pop(session_id, None)
        await self._caps.closed(closed)
        await self.approvals.session_closed(closed)
        if closed.workspace is not None:
            await self._release(session_id, closed.tenant, closed.workspace)
        await self._publish(
            "session_closed",
            closed.tenant,
            SessionClosed(
                session_id=session_id, tenant=closed.tenant, calls=closed.calls, at=_now()
            ),
        )
        return closed

    async def _release(self, session_id: str, tenant: str, workspace: str) -> None:
        """Ask the sandbox service to remove what the session's sandbox kept; a failure is
        logged, since the session is closed either way and a restarted sandbox service
        removes its leftovers."""
        try:
            await request(
                self._client,
                subjects.SANDBOX_RELEASE,
                SandboxRelease(session_id=session_id, tenant=tenant, workspace=workspace),
                SandboxReleased,
                timeout_s=self._timeout_s,
            )
        except BastionError as error:
            logger.warning(
                "the session's sandbox was not released",
                extra={"session": session_id, "code": error.code},
            )

    async def call(self, session_id: str, call: ToolCall) -> CallResult:
        """Run one call of the session, in its turn; a refusal is answered, not raised."""
        call_id = call.call_id or secrets.token_hex(8)
        started = time.perf_counter()
        at = self._enter(session_id)
        self._calls_in[session_id, call_id] += 1
        try:
            if self._rates.enabled:
                try:
                    await self._rates.take((await self._as_opened(session_id)).tenant)
                except (RateLimited, QuotaUnavailable) as error:
                    return error.to_reply()
            try:
                session, result = await self._in_turn(session_id, call, call_id, started, at=at)
            except TurnTimeout:
                if call.call_id is None or not await self._records.running(session_id, call_id):
                    raise
                # Sent again while its first sending still runs on a replica holding the
                # turn: that run's outcome is the answer, so wait as long as the run may take.
                waiting = await self.get(session_id)
                wait_s = call_wait_s(waiting, call.tool, call.input)
                session, result = await self._in_turn(session_id, call, call_id, started, wait_s)
        finally:
            self._leave(session_id, *at)
            self._calls_in[session_id, call_id] -= 1
            if not self._calls_in[session_id, call_id]:
                del self._calls_in[session_id, call_id]
        duration_s = time.perf_counter() - started
        error_code = error_code_of(result)
        # A tool name the session does not offer is the agent's to choose: as a label it
        # would let an agent mint any number of series, so it is counted as `unknown`.
        known = find_tool(session, call.tool) is not None
        labels = {
            "bastion.tool": call.tool if known else "unknown",
            "bastion.outcome": error_code or "ok",
        }
        calls.add(1, labels)
        call_duration.record(duration_s, labels)
        await self._publish(
            "call_finished",
            session.tenant,
            CallFinished(
                session_id=session_id,
                tenant=session.tenant,
                call_id=call_id,
                tool=call.tool,
                error_code=error_code,
                duration_s=duration_s,
                at=_now(),
            ),
        )
        return result

    async def _in_turn(
        self,
        session_id: str,
        call: ToolCall,
        call_id: str,
        started: float,
        wait_s: float | None = None,
        *,
        at: tuple[CallOrder, Place] | None = None,
    ) -> tuple[SessionInfo, CallResult]:
        """The call made in the session's turn — shared when it reads, alone otherwise or
        when it turns out to need the session alone — counted and audited; the session it
        found."""
        at = self._enter(session_id) if at is None else at
        try:
            tool = find_tool(await self._as_opened(session_id), call.tool)
            # a journaled call's entry, and a call id's first sending, are their own to
            # settle: such a call is made alone
            shared = (
                tool is not None
                and tool.effect == "read"
                and not is_journaled(tool)
                and self._calls_in[session_id, call_id] <= 1
            )
        except BaseException:
            self._leave(session_id, *at)
            raise
        made = partial(self._made, session_id, call, call_id, started=started, wait_s=wait_s, at=at)
        try:
            return await made(shared=shared)
        except NeedsTurnAlone:  # first in line again, to hold the turn alone
            return await made(shared=False)

    async def _made(
        self,
        session_id: str,
        call: ToolCall,
        call_id: str,
        *,
        started: float,
        wait_s: float | None,
        at: tuple[CallOrder, Place],
        shared: bool,
    ) -> tuple[SessionInfo, CallResult]:
        async with (
            self._audit.together(),
            self._turn(session_id, wait_s, at=at, shared=shared),
        ):
            session, revision = await self._store.get(session_id)
            annotate(session_id=session_id, tenant=session.tenant, tool=call.tool)
            try:
                result: CallResult = await self._call(
                    session, call, call_id, started, alone=not shared
                )
            except BastionError as error:
                result = error.to_reply()
            await self._audit.result(session, call_id, call.tool, result)
            await self._store.update(
                session_id,
                lambda s: msgspec.structs.replace(s, calls=s.calls + 1),
                known=(session, revision),
            )
        return session, result

    async def _call(
        self, session: SessionInfo, call: ToolCall, call_id: str, started: float, *, alone: bool
    ) -> ToolOutput | CallParked:
        """The call's outcome; in a shared turn (not `alone`), `NeedsTurnAlone` is raised
        before anything is recorded when the policy asks or the call id's first sending
        still runs."""
        if call.call_id is not None:
            # Sent again with its call id (its first sending got no answer): the outcome of
            # the one run it had, found in the turn the first held while it ran.
            recorded = await self._records.recall(session.session_id, call_id, alone=alone)
            if isinstance(recorded, ErrorReply):
                raise RemoteError(recorded.code, recorded.message)
            if recorded is not None:
                return recorded
        if session.state == "closed":
            raise RemoteError(
                codes.SESSION_CLOSED,
                f"session {session.session_id} is closed: open a new session to make calls",
            )
        await self.approvals.refuse_if_waiting(session)
        tool = find_tool(session, call.tool)
        if tool is None:
            offered = ", ".join(t.name for t in session.tools) or "none"
            how = _how_to_get(session, call.tool)
            raise RemoteError(
                codes.UNKNOWN_TOOL,
                f"session {session.session_id} has no tool {call.tool!r}{how}; "
                f"its tools: {offered}",
            )
        input_type = input_type_of(tool)
        try:
            tool_input = tool_input_of(tool, call.input)
        except msgspec.ValidationError as error:
            reason = describe_decode_error(error, input_type).split(": ", 1)[1]
            fields = ", ".join(f.name for f in msgspec.structs.fields(input_type))
            raise InvalidInput(
                f"the input of {tool.name} is not valid: {reason} ({tool.name} takes: {fields})"
            ) from None
        await prefetch_upstream(self._client, session, tool, call_id)
        tool = await skill_tool(self._client, session, tool, tool_input, self._timeout_s)
        with span("orchestrator.journal.recall"):
            known = await self._journal.recall(session, tool, tool_input, call_id)
        if known is not None:
            return known
        with span("orchestrator.policy", tool=tool.name):
            touched = await touched_paths(self._client, session, tool_input, self._timeout_s)
            decision = await ask_policy(
                self._client,
                policy_request(session, tool, tool_input, call.input, _now(), paths=touched.paths),
                self._timeout_s,
            )
            annotate(decision=decision.outcome)
        annotate(decision=decision.outcome)
        if decision.outcome == "ask" and not alone:
            raise NeedsTurnAlone(f"the policy asks about {tool.name}: it is asked alone")
        await self._publish(
            "call_decided",
            session.tenant,
            CallDecided(
                session_id=session.session_id,
                tenant=session.tenant,
                call_id=call_id,
                tool=tool.name,
                outcome=decision.outcome,
                rule=decision.rule,
                at=_now(),
            ),
        )
        await self._audit.decision(session, call_id, tool.name, decision)
        if decision.outcome == "deny":
            raise RemoteError(codes.DENIED, f"refused: {decision.reason}")
        if touched.problem is not None:
            raise touched.problem
        if decision.outcome == "ask":
            with span("orchestrator.approval.park"):
                return await self.approvals.ask(session, call, call_id, tool, decision)
        text = await self._runner.run(
            session,
            tool,
            tool_input,
            call_input=call.input,
            call_id=call_id,
            decision=decision,
            alone=alone,
            stream=call.stream,
            record=call.call_id is not None or parents_calls(tool),
        )
        return ToolOutput(
            call_id=call_id,
            tool=tool.name,
            effect=tool.effect,
            text=text,
            decision=decision,
            duration_s=time.perf_counter() - started,
        )

    async def _publish(self, kind: str, tenant: str, event: object) -> None:
        await self._client.publish(
            subjects.event(kind, tenant), encode(event), headers=headers_with_context() or None
        )
