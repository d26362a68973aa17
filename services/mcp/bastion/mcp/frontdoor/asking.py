"""A call the policy asks about: put to the MCP client's person, or waited on for a while.

When the client takes form elicitation, the approval is asked there (approve once, always,
or decline with a reason), answered through `approvals.answer`, and the call's real result
returned. An "always" for a call no rule can cover (a command holding `;`, say) approves
it once, and its result starts with the sentence saying why no rule was made. Otherwise
the front door waits a bounded time for a person to answer elsewhere
(`bastion agent continue`, `POST /v1/approvals/ID`), watching the parked call's key in the
approvals bucket (the result names it), then says how to.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final

import anyio
import msgspec
import nats.errors
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
from bastion.proto.subjects import APPROVALS_BUCKET
from bastion.proto.tools import CallParked, CallResult, ToolOutput
from bastion.shared.bus import Requester
from bastion.shared.errors import BastionError, InvalidInput, RemoteError, Unavailable
from bastion.shared.kv import TypedBucket

__all__ = ["Asking", "declares_form_elicitation", "takes_form_elicitation", "takes_input_required"]

logger = logging.getLogger(__name__)

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


Asked = ParkedCall | CallParked
"""A call parked for a person: as the approvals list it, or as its call was answered."""


def _question(parked: Asked) -> str:
    because = " (the session is tainted)" if parked.decision.asked_because_tainted else ""
    return (
        f"Bastion asks before {parked.tool} runs{because}: {parked.decision.reason}."
        f"\nInput: {_shown(parked.input)}"
    )


@dataclass(frozen=True)
class Asking(Requester):
    """Settles a parked call for the MCP request that made it: asking its person within
    `timeout_s`, or waiting `wait_s` at most for an answer given elsewhere."""

    wait_s: float

    async def settle(
        self, ctx: ServerRequestContext[Any, Any], parked: CallParked, by: str
    ) -> CallResult | InputRequiredResult:
        """The parked call's result once a person answered, or an error saying how to; for
        a stateless client that takes elicitation, the question to come back with."""
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
            parked = await self._parked(session_id, request_id)
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
        self, ctx: ServerRequestContext[Any, Any], parked: Asked, by: str
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

    async def _answer(self, parked: Asked, answer: ElicitResult, by: str) -> CallResult:
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

    async def _send(self, parked: Asked, decision: str, by: str, reason: str) -> CallResult:
        """The person's `decision` on `parked`, carried out by `approvals.answer`.

        Raises:
            RemoteError: the answer was refused (`conflict`: answered elsewhere already;
                `invalid_input`: no "always" rule can cover the call).
        """
        answered: ApprovalAnswered = await self.ask(
            subjects.APPROVALS_ANSWER,
            ApprovalAnswer(
                request_id=parked.request_id,
                approve=decision != "decline",
                by=by,
                always=decision == "always",
                reason="" if decision != "decline" else reason,
            ),
            ApprovalAnswered,
        )
        return answered.result

    async def _wait(self, parked: Asked) -> CallResult:
        """Wait up to the bounded time for an answer given elsewhere: each change of the
        parked call's key in the approvals bucket, until it has its outcome."""
        with anyio.move_on_after(self.wait_s):
            try:
                approvals = await TypedBucket.existing(self.client, APPROVALS_BUCKET, ParkedCall)
                if approvals is None:
                    raise Unavailable(f"the KV bucket {APPROVALS_BUCKET} is not there")
                async with aclosing(approvals.watch(parked.request_id)) as changes:
                    async for change in changes:
                        if change.value is None:
                            continue
                        answered = _outcome(parked, change.value)
                        if answered is not None:
                            return answered
            except (BastionError, nats.errors.Error) as error:  # the agent is told how to answer
                logger.warning("a parked call cannot be watched", extra={"error": str(error)})
        return ErrorReply(
            code=codes.WAITING_FOR_APPROVAL,
            message=(
                f"{parked.tool} waits for a person's approval: {parked.decision.reason}. "
                f"Nobody answered within {self.wait_s:g} s. It runs as soon as a person "
                f"approves it: `bastion agent continue {parked.session_id} --approve` "
                f"(or `--decline WHY`), or `POST /v1/approvals/{parked.request_id}` on the "
                'front door with {"approve": true}. Until then this session takes no other '
                "call."
            ),
        )

    async def _parked(self, session_id: str, request_id: str) -> ParkedCall | None:
        """The session's parked call `request_id`, in whatever state, if it has one."""
        try:
            found: ApprovalList = await self.ask(
                subjects.APPROVALS_LIST,
                ApprovalQuery(session_id=session_id, every_state=True),
                ApprovalList,
            )
        except BastionError:
            return None
        for parked in found.approvals:
            if parked.request_id == request_id:
                return parked
        return None


def _outcome(parked: Asked, current: ParkedCall) -> CallResult | None:
    """The parked call's result once it has one, as its approvals entry now says."""
    if current.state in ("done", "declined") and current.result is not None:
        return current.result
    if current.state == "uncertain":
        return ErrorReply(
            code=codes.UNCERTAIN,
            message=f"{parked.tool} was approved but its outcome is not known "
            "(a service stopped while it ran); it will not run again",
        )
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
