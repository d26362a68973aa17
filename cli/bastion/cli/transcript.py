"""How a scripted session is printed: a call, its result, and a call that waits for a person."""

from __future__ import annotations

import json
import sys
from typing import Any

from bastion.proto import errors as codes
from bastion.proto.approvals import ParkedCall
from bastion.proto.errors import ErrorReply
from bastion.proto.tools import CallParked, CallResult

__all__ = ["PREVIEW_CHARS", "say", "show_input", "show_result", "show_waiting"]

PREVIEW_CHARS = 2000
"""The most of a call's input the transcript shows: a large content is previewed, never
echoed whole."""


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def show_input(tool_input: dict[str, Any]) -> str:
    """The input as compact JSON, cut after `PREVIEW_CHARS` characters (and said so)."""
    shown = json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if len(shown) <= PREVIEW_CHARS:
        return shown
    return f"{shown[:PREVIEW_CHARS]}… [{len(shown) - PREVIEW_CHARS} more characters not shown]"


def show_result(result: CallResult) -> str:
    """The `← …` line(s) of a call's result; one that ran without asking says who allowed it."""
    if isinstance(result, ErrorReply):
        return f"← error ({result.code}): {result.message}"
    if isinstance(result, CallParked):
        return f"← error ({codes.WAITING_FOR_APPROVAL}): {result.message}"
    if result.decision.approved_by:
        return (
            f"← [ran without asking: pre-approved by {result.decision.approved_by}]\n{result.text}"
        )
    return f"← {result.text}"


def show_waiting(parked: ParkedCall | CallParked) -> None:
    """The lines of a call parked for a person, and how to answer it."""
    tainted = parked.decision.asked_because_tainted
    say(
        "← waiting for a person's approval"
        + (
            " (asked because the session is tainted: it read content from outside, so its "
            "pre-approvals are suspended)"
            if tainted
            else ""
        )
    )
    sid = parked.session_id
    say(
        f"session {sid}: waiting for you: {parked.tool} {show_input(parked.input)} "
        f"({parked.decision.reason}; request {parked.request_id}). Answer with "
        f"`bastion agent continue {sid} --approve` (`--always [RULE]` for calls like it "
        f"again this session) or `--decline <why>`."
    )
