"""A call the policy asks about: put to the MCP client's person, or waited on for a while.

When the client takes form elicitation, the approval is asked there (approve once, always,
or decline with a reason), answered through `approvals.answer`, and the call's real result
returned. Otherwise the front door waits a bounded time for a person to answer elsewhere
(`bastion agent continue`, `POST /v1/approvals/ID`), then says how to.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

import anyio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError, NoBackChannelError

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
from bastion.proto.tools import CallResult
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError, RemoteError

__all__ = ["Asking", "takes_form_elicitation"]

logger = logging.getLogger(__name__)

_POLL_S: Final = 0.25
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


def takes_form_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared form elicitation and this request can carry one."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return False
    elicitation = capabilities.elicitation
    # An empty `elicitation: {}` means form mode (the spec keeps that for older clients).
    form = elicitation.form is not None or elicitation.url is None
    return form and ctx.session.can_send_request


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
    ) -> CallResult:
        """The parked call's result once a person answered, or an error saying how to."""
        parked = await self._parked(session_id, call_id)
        if parked is None:
            return ErrorReply(code=codes.WAITING_FOR_APPROVAL, message=parked_message)
        if takes_form_elicitation(ctx):
            try:
                return await self._ask_client(ctx, parked, by)
            except NoBackChannelError:
                pass
        return await self._wait(parked)

    async def _ask_client(
        self, ctx: ServerRequestContext[Any, Any], parked: ParkedCall, by: str
    ) -> CallResult:
        because = " (the session is tainted)" if parked.decision.asked_because_tainted else ""
        try:
            answer = await ctx.session.elicit_form(
                message=(
                    f"Bastion asks before {parked.tool} runs{because}: {parked.decision.reason}."
                    f"\nInput: {_shown(parked.input)}"
                ),
                requested_schema=APPROVAL_FORM,
                related_request_id=ctx.request_id,
            )
        except MCPError:
            # The client could not ask (no person there): the call stays parked.
            return await self._wait(parked)
        content = answer.content or {}
        decision = content.get("decision") if answer.action == "accept" else None
        if decision not in _DECISIONS:
            decision = "decline"
        reason = str(content.get("reason") or "").strip()[:1000]
        if decision == "decline" and not reason:
            reason = "declined in the MCP client" if answer.action != "cancel" else "cancelled"
        try:
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
        except RemoteError as error:
            if error.code != codes.CONFLICT:
                raise
            # Someone answered elsewhere first: theirs is the answer.
            return await self._wait(parked)
        logger.info(
            "approval answered through MCP elicitation",
            extra={"request_id": parked.request_id, "decision": decision},
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
        self, session_id: str, call_id: str, *, every: bool = False
    ) -> ParkedCall | None:
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
            if parked.call_id == call_id:
                return parked
        return None


def _shown(tool_input: dict[str, Any]) -> str:
    """The input as a person reads it, cut short: file contents can be long."""
    text = json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 600 else text[:600] + "…"
