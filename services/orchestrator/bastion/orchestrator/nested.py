"""The calls a `run_code` program makes, relayed by the sandbox service: each decided and
made as the agent's own call of the tool would be, inside the run_code call's turn.

A nested call takes no place in the session's line and no turn: its parent, the run_code
call, holds the session's turn while its program runs, so a nested call waiting for one
would wait for itself. It is made only while that parent is running (its record says so),
and only for a tool that reads: one that writes, reaches outside, changes what the session
may do, or that the policy would ask a person about, is refused to the program, never
parked. Otherwise it goes the agent's call's way: the tenant's calls per second, the
policy, the before-tool hooks, the audit (each record naming the parent call), the
journal, taint, the after-tool hooks and its record by call id (docs/architecture.md §2.2).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Final

import msgspec

from bastion.orchestrator.audit import AuditLog
from bastion.orchestrator.callrecords import CallRecords
from bastion.orchestrator.catalogue import find_tool, input_type_of, tool_input_of
from bastion.orchestrator.gate import ask_policy, policy_request, touched_paths
from bastion.orchestrator.quota import TenantRates
from bastion.orchestrator.running import Runner
from bastion.orchestrator.store import SessionStore
from bastion.proto import errors as codes
from bastion.proto.session import SessionInfo, ToolSpec
from bastion.proto.tools import NestedCall, NestedResult, ToolOutput
from bastion.shared.bus import Client
from bastion.shared.codec import describe_decode_error
from bastion.shared.errors import BastionError, InvalidInput, RemoteError
from bastion.shared.telemetry import span

__all__ = ["RUN_CODE", "NestedCalls", "callable_from_code"]

RUN_CODE: Final = "run_code"
_NOT_FROM_CODE: Final = frozenset({RUN_CODE, "skill_read"})
"""Tools that read but are not called from code: a program in a program, and reading a
skill (which lets its allowed tools run without asking)."""


def callable_from_code(tool: ToolSpec) -> bool:
    """Whether a program may call `tool`: it only reads, and what it reads is not the
    outside's (an open-world upstream tool's answer)."""
    return tool.effect == "read" and not tool.taints and tool.name not in _NOT_FROM_CODE


def _refused(tool: str) -> RemoteError:
    return RemoteError(
        codes.DENIED, f"run_code calls only tools that read; make the {tool} call yourself"
    )


class NestedCalls:
    """Makes the nested calls of the session's running run_code calls."""

    def __init__(
        self,
        client: Client,
        store: SessionStore,
        timeout_s: float,
        *,
        audit: AuditLog,
        runner: Runner,
        records: CallRecords,
        rates: TenantRates,
    ) -> None:
        self._client = client
        self._store = store
        self._timeout_s = timeout_s
        self._audit = audit
        self._runner = runner
        self._records = records
        self._rates = rates

    async def call(self, session_id: str, nested: NestedCall) -> NestedResult:
        """The nested call's text, or a typed error the program is given as a ToolError."""
        session, _ = await self._store.get(session_id)
        parent = nested.parent_call_id
        if session.state == "closed":
            raise RemoteError(
                codes.SESSION_CLOSED,
                f"session {session_id} is closed: open a new session to make calls",
            )
        if await self._records.running_tool(session_id, parent) != RUN_CODE:
            raise InvalidInput(
                f"session {session_id} has no run_code call {parent!r} running: a nested "
                "call is made only for a program that runs now"
            )
        tool = find_tool(session, nested.tool)
        if tool is None:
            offered = ", ".join(t.name for t in session.tools if callable_from_code(t))
            raise RemoteError(
                codes.UNKNOWN_TOOL,
                f"session {session_id} has no tool {nested.tool!r}; the tools a program may "
                f"call: {offered or 'none'}",
            )
        if not callable_from_code(tool):
            raise _refused(tool.name)
        if self._rates.enabled:  # a program's calls count as the tenant's, as its own would
            await self._rates.take(session.tenant)
        call_id = secrets.token_hex(8)
        with span("orchestrator.nested", tool=tool.name):
            return NestedResult(
                call_id=call_id, text=await self._made(session, tool, nested, call_id)
            )

    async def _made(
        self, session: SessionInfo, tool: ToolSpec, nested: NestedCall, call_id: str
    ) -> str:
        parent = nested.parent_call_id
        try:
            tool_input = tool_input_of(tool, nested.input)
        except msgspec.ValidationError as error:
            reason = describe_decode_error(error, input_type_of(tool)).split(": ", 1)[1]
            raise InvalidInput(f"the input of {tool.name} is not valid: {reason}") from None
        touched = await touched_paths(self._client, session, tool_input, self._timeout_s)
        decision = await ask_policy(
            self._client,
            policy_request(
                session, tool, tool_input, nested.input, datetime.now(UTC), paths=touched.paths
            ),
            self._timeout_s,
        )
        await self._audit.decision(session, call_id, tool.name, decision, parent_call_id=parent)
        if decision.outcome == "deny":
            raise RemoteError(codes.DENIED, f"refused: {decision.reason}")
        if decision.outcome == "ask":
            raise RemoteError(
                codes.NEEDS_APPROVAL,
                f"run_code calls only tools that run without asking a person, and the "
                f"policy asks about this {tool.name} call: make it yourself",
            )
        if touched.problem is not None:
            raise touched.problem
        try:
            text = await self._runner.run(
                session,
                tool,
                tool_input,
                call_input=nested.input,
                call_id=call_id,
                decision=decision,
                alone=False,
                parent_call_id=parent,
            )
        except BastionError as error:
            await self._audit.result(
                session, call_id, tool.name, error.to_reply(), parent_call_id=parent
            )
            raise
        output = ToolOutput(
            call_id=call_id,
            tool=tool.name,
            effect=tool.effect,
            text=text,
            decision=decision,
            duration_s=0.0,
        )
        await self._audit.result(session, call_id, tool.name, output, parent_call_id=parent)
        return text
