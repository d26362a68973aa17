"""`run_code` as the orchestrator runs it: the program sent to the sandbox service, and
what it printed as the model is shown it (cut at `MAX_OUTPUT` characters); a program that
failed is an error whose message is its output and traceback."""

from __future__ import annotations

from typing import Final

from bastion.orchestrator.toolcall import Call
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.sandbox import ExecResult, RunCode
from bastion.proto.toolinput import RunCodeInput
from bastion.shared.errors import BastionError

__all__ = ["MAX_OUTPUT", "ProgramFailed", "program_text", "run_code"]

MAX_OUTPUT: Final = 24_000
"""The most of a program's output (stdout, then stderr) the model is shown, in characters."""


class ProgramFailed(BastionError):
    """A `run_code` program raised, exited with another status than 0, or was stopped."""

    code = codes.PROGRAM_FAILED


def _cut(text: str) -> str:
    if len(text) <= MAX_OUTPUT:
        return text
    half = MAX_OUTPUT // 2
    left_out = len(text) - 2 * half
    return (
        f"{text[:half]}\n[the output was cut: {left_out} characters in the middle were left "
        f"out (run_code shows {MAX_OUTPUT}); print less, or a summary]\n{text[-half:]}"
    )


def _ended(result: ExecResult, wall_s: float) -> str:
    if result.ended == "timeout":
        return f"the program ran out of its {wall_s:g} s (the sandbox's time limit) and was killed"
    if result.limit_hit:
        return f"the program hit its sandbox's {result.limit_hit} limit"
    if result.ended == "signal":
        return f"the program was killed by signal {result.signal}"
    return f"the program failed (exit status {result.exit_status})"


def program_text(result: ExecResult, wall_s: float) -> str:
    """What the program printed, stdout then stderr, cut to `MAX_OUTPUT`.

    Raises:
        ProgramFailed: it did not end with status 0; the message is why, then its output.
    """
    printed = result.stdout
    if result.stderr:
        printed += ("\n" if printed and not printed.endswith("\n") else "") + result.stderr
    if result.ended == "exited" and result.exit_status == 0:
        return _cut(printed)
    raise ProgramFailed(_cut(f"{_ended(result, wall_s)}:\n{printed}".rstrip("\n")))


async def run_code(call: Call, given: RunCodeInput) -> str:
    """`run_code`: the program in a sandbox of its own (no workspace, no network), its tool
    calls made as nested calls of this one, within the session's limits."""
    limits = call.session.limits
    result = await call.ask(
        subjects.SANDBOX_RUN_CODE,
        RunCode(
            **call.whose(),
            workspace=call.workspace,
            call_id=call.call_id,
            code=given.code,
            backend=call.session.sandbox,
            limits=limits,
        ),
        ExecResult,
        timeout_s=limits.wall_s + call.timeout_s,
    )
    return program_text(result, limits.wall_s)
