"""What a scripted run did, kept for `agent run|continue -o json`: one object at the end.

With `-o json` the transcript's lines go to standard error, for a person watching, and
standard output gets one object: the session, the exit status, `items` (each step in
order: a call with its input and result, the call a person answered first with their
answer, or what the agent said) and `waiting`, the call the run stopped at (or null).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

from bastion.cli.common import write_json
from bastion.cli.script import Step
from bastion.proto.approvals import ParkedCall
from bastion.proto.tools import CallParked, CallResult

__all__ = ["RunRecord", "recorded"]


class RunRecord:
    """The steps of one run as they happen, and the call it waits on, if one."""

    def __init__(self) -> None:
        self.session_id = ""
        self.items: list[dict[str, Any]] = []
        self.waiting: ParkedCall | CallParked | None = None

    def said(self, text: str) -> None:
        self.items.append({"say": text})

    def answered(self, parked: ParkedCall, result: CallResult | None) -> None:
        """The call a person answered (`agent continue`), before the rest of the script."""
        self.items.append(
            {
                "tool": parked.tool,
                "input": parked.input,
                "answer": parked.state,
                "answered_by": parked.answered_by,
                "result": result,
            }
        )

    def called(self, step: Step, result: CallResult) -> None:
        self.items.append({"tool": step.tool, "input": step.input, "result": result})


def recorded(output: str, run: Callable[[RunRecord], int]) -> int:
    """`run`'s status; with `output` json, its transcript on stderr and its record on stdout."""
    record = RunRecord()
    if output != "json":
        return run(record)
    with redirect_stdout(sys.stderr):
        status = run(record)
    write_json(
        {
            "session_id": record.session_id,
            "status": status,
            "items": record.items,
            "waiting": record.waiting,
        }
    )
    return status
