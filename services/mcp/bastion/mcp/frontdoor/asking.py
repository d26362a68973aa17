"""A call the policy asks about: put to the MCP client's person, or waited on for a while.

When the client takes form elicitation, the approval is asked there (approve once, always,
or decline with a reason), answered through `approvals.answer`, and the call's real result
returned. An "always" for a call no rule can cover (a command holding `;`, say) approves
it once, and its result starts with the sentence saying why no rule was made. Otherwise
the front door waits a bounded time for a person to answer elsewhere
(`bastion agent continue`, `POST /v1/approvals/ID`), then says how to.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

import anyio
import msgspec
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp_types import (
    ClientCapabilities,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

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
from bastion.proto.tools import CallResult, ToolOutput
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError, InvalidInput, RemoteError

__all__ = ["Asking", "declares_form_elicitation", "takes_form_elicitation", "takes_input_required"]

logger = logging.getLogger(__name__)

_POLL_S: Final = 0.25
_INPUT_KEY: Final = "approval"
_STATE_PREFIX: Final = "approval:"
_DECISIONS: Final = ("approve", "always", "decline")
APPROVAL_FORM: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Your answer",
            "enum": list(_DECISIONS),
            "enumNames": [
                "Approve this call once",
                "Approve, and allow calls like it for the rest of the session",
                "Decline",
            ],
        },
        "reason": {
            "type": "string",
            "title": "Why (for a decline)",
            "maxLength": 1000,
        },
    },
    "required": ["decision"],
}


def declares_form_elicitation(capabilities: ClientCapabilities | None) -> bool:
    """Whether a client's capabilities take form elicitation."""
    if capabilities is None or capabilities.elicitation is None:
        return False
    elicitation = capabilities.elicitation
    # An empty `elicitation: {}` means form mode (the spec keeps that for older clients).
    return elicitation.form is not None or elicitation.url is None


def takes_form_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared form elicitation and this request can carry one."""
    return declares_form_elicitation(ctx.session.client_capabilities) and (
        ctx.session.can_send_request
    )


def takes_input_required(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether a stateless (2026-07-28) client can be asked by an `InputRequiredResult`."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and declares_form_elicitation(
        ctx.session.client_capabilities
    )


def _question(parked: ParkedCall) -> str:
    because = " (the session is tainted)" if parked.decision.asked_because_tainted else ""
    return (
        f"Bastion asks before {parked.tool} runs{because}: {parked.decision.reason}."
        f"\nInput: {_shown(parked.input)}"
    )


class Asking:
    """Settles a parked call for the MCP request that made it."""

    def __init__(self, client: Client, timeout_s: float, wait_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._wait_s = wait_s

    async def settle(
        self,
        ctx: ServerRequestContext[Any, Any],
        session_id: str,
        call_id: str,
        parked_message: str,
        by: str,
    ) -> CallResult | InputRequiredResult:
        """The parked call's result once a person answered, or an error saying how to; for
        a stateless client that takes elicitation, the question to come back with."""
        parked = await self._parked(session_id, call_id)
        if parked is None:
            return ErrorReply(code=codes.WAITING_FOR_APPROVAL, message=parked_message)
        if takes_form_elicitation(ctx):
            try:
                return await self._ask_client(ctx, parked, by)
            except NoBackChannelError:
                pass
        if takes_input_required(ctx):
            # The stateless era asks through the client: it comes back with the answer.
            return InputRequiredResult(
                input_requests={
                    _INPUT_KEY: ElicitRequest(
                        params=ElicitRequestFormParams(
                            message=_question(parked), requested_schema=APPROVAL_FORM
                        )
                    )
                },
                request_state=_STATE_PREFIX + parked.request_id,
            )
        return await self._wait(parked)

    async def resume(
        self,
        session_id: str,
        request_state: str,
        responses: Mapping[str, object] | None,
        by: str,
    ) -> CallResult:
        """A stateless call coming back with the person's answer to its approval.

        Raises:
            InvalidInput: the state is not one this front door gave, or not this session's.
        """
        request_id = request_state.removeprefix(_STATE_PREFIX)
        parked = None
        if request_state.startswith(_STATE_PREFIX):
            parked = await self._parked(session_id, request_id, every=True, by_request=True)
        if parked is None:
            raise InvalidInput(
                "the requestState of this call is not one of an approval of this session: "
                "call the tool again without it"
            )
        answer = (responses or {}).get(_INPUT_KEY)
        if parked.state != "pending" or not isinstance(answer, ElicitResult):
            return await self._wait(parked)
        return await self._answer(parked, answer, by)

    async def _ask_client(
        self, ctx: ServerRequestContext[Any, Any], parked: ParkedCall, by: str
    ) -> CallResult:
        try:
            answer = await ctx.session.elicit_form(
                message=_question(parked),
                requested_schema=APPROVAL_FORM,
                related_request_id=ctx.request_id,
            )
        except MCPError:
            # The client could not ask (no person there): the call stays parked.
            return await self._wait(parked)
        return await self._answer(parked, answer, by)

    async def _answer(self, parked: ParkedCall, answer: ElicitResult, by: str) -> CallResult:
        """Carry out the person's answer given in the client; the call's result."""
        content = answer.content or {}
        decision = content.get("decision") if answer.action == "accept" else None
        if decision not in _DECISIONS:
            decision = "decline"
        reason = str(content.get("reason") or "").strip()[:1000]
        if decision == "decline" and not reason:
            reason = "declined in the MCP client" if answer.action != "cancel" else "cancelled"
        try:
            result = await self._send(parked, decision, by, reason)
        except RemoteError as error:
            if error.code == codes.CONFLICT:
                # Someone answered elsewhere first: theirs is the answer.
                return await self._wait(parked)
            if error.code != codes.INVALID_INPUT or decision != "always":
                raise
            # No rule can cover this call (a compound command): the person approved it,
            # so it runs once, and the result says why no rule was made.
            result = _noted(await self._send(parked, "approve", by, ""), error.message)
        logger.info(
            "approval answered through MCP elicitation",
            extra={"request_id": parked.request_id, "decision": decision},
        )
        return result

    async def _send(self, parked: ParkedCall, decision: str, by: str, reason: str) -> CallResult:
        """The person's `decision` on `parked`, carried out by `approvals.answer`.

        Raises:
            RemoteError: the answer was refused (`conflict`: answered elsewhere already;
                `invalid_input`: no "always" rule can cover the call).
        """
        answered: ApprovalAnswered = await request(
            self._client,
            subjects.APPROVALS_ANSWER,
            ApprovalAnswer(
                request_id=parked.request_id,
                approve=decision != "decline",
                by=by,
                always=decision == "always",
                reason="" if decision != "decline" else reason,
            ),
            ApprovalAnswered,
            timeout_s=self._timeout_s,
        )
        return answered.result

    async def _wait(self, parked: ParkedCall) -> CallResult:
        """Wait up to the bounded time for an answer given elsewhere."""
        with anyio.move_on_after(self._wait_s):
            while True:
                current = await self._parked(parked.session_id, parked.call_id, every=True)
                done = current is not None and current.state in ("done", "declined")
                if done and current is not None and current.result is not None:
                    return current.result
                if current is not None and current.state == "uncertain":
                    return ErrorReply(
                        code=codes.UNCERTAIN,
                        message=f"{parked.tool} was approved but its outcome is not known "
                        "(a service stopped while it ran); it will not run again",
                    )
                await anyio.sleep(_POLL_S)
        return ErrorReply(
            code=codes.WAITING_FOR_APPROVAL,
            message=(
                f"{parked.tool} waits for a person's approval: {parked.decision.reason}. "
                f"Nobody answered within {self._wait_s:g} s. It runs as soon as a person "
                f"approves it: `bastion agent continue {parked.session_id} --approve` "
                f"(or `--decline WHY`), or `POST /v1/approvals/{parked.request_id}` on the "
                'front door with {"approve": true}. Until then this session takes no other '
                "call."
            ),
        )

    async def _parked(
        self, session_id: str, wanted: str, *, every: bool = False, by_request: bool = False
    ) -> ParkedCall | None:
        """The session's parked call of call id (or request id) `wanted`, if any."""
        try:
            found: ApprovalList = await request(
                self._client,
                subjects.APPROVALS_LIST,
                ApprovalQuery(session_id=session_id, every_state=every),
                ApprovalList,
                timeout_s=self._timeout_s,
            )
        except BastionError:
            return None
        for parked in found.approvals:
            if (parked.request_id if by_request else parked.call_id) == wanted:
                return parked
        return None


def _noted(result: CallResult, problem: str) -> CallResult:
    """`result` of a call approved once because "always" could not be: the why, first."""
    note = f"[approved once, not always: {problem.removesuffix(' (nothing was approved yet)')}]"
    if isinstance(result, ToolOutput):
        return msgspec.structs.replace(result, text=f"{note}\n{result.text}")
    return msgspec.structs.replace(result, message=f"{note} {result.message}")


def _shown(tool_input: dict[str, Any]) -> str:
    """The input as a person reads it, cut short: file contents can be long."""
    text = json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 600 else text[:600] + "…"
