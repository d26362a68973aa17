"""The sandbox's tools as the orchestrator runs them — commands, checks and file tools —
and the text the model is shown of a command's result."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from bastion.orchestrator.taint import is_tainted
from bastion.orchestrator.toolcall import Call
from bastion.proto import sandbox, subjects, toolinput
from bastion.proto.policy import PolicyRequest
from bastion.proto.sandbox import CodeCheck, CodeReport, ExecRequest, ExecResult, FileResult, Limits
from bastion.proto.toolinput import DiagnosticsInput, RunTestsInput, ShellInput
from bastion.shared.deadlines import shell_wall_s

__all__ = [
    "FILE_REQUESTS",
    "format_exec_result",
    "in_sandbox",
    "run_check",
    "run_file_tool",
    "run_shell",
]

FILE_REQUESTS: dict[type[msgspec.Struct], Any] = {
    toolinput.ReadFileInput: sandbox.ReadFile,
    toolinput.WriteFileInput: sandbox.WriteFile,
    toolinput.EditFileInput: sandbox.EditFile,
    toolinput.ApplyPatchInput: sandbox.ApplyPatch,
    toolinput.ListFilesInput: sandbox.ListFiles,
    toolinput.FindFilesInput: sandbox.FindFiles,
    toolinput.SearchFilesInput: sandbox.SearchFiles,
}
"""Each file tool's input and the `sandbox.files` request that carries it."""
_SHOWING_PATHS: tuple[type[msgspec.Struct], ...] = (
    toolinput.ListFilesInput,
    toolinput.FindFilesInput,
    toolinput.SearchFilesInput,
)
"""The tools whose answer names or shows other files than their target: the sandbox has
each path they would show judged as a read (docs/policies.md)."""

_SIGNAL_NAMES = {
    9: "SIGKILL",
    15: "SIGTERM",
    6: "SIGABRT",
    11: "SIGSEGV",
    24: "SIGXCPU",
    25: "SIGXFSZ",
}


_LIMIT_SENTENCES = {
    "oom": "its memory limit ran out and the kernel killed a process of it",
    "process_limit": "it reached its limit on processes and a fork was refused",
    "cpu_time": "it ran out of CPU time",
    "file_size": "it wrote a file past the per-file size limit",
}


def _cut(name: str, cut: int) -> str:
    return f"{name} was cut: {cut} bytes in the middle were left out (the output limit)"


def format_exec_result(result: ExecResult, wall_s: float | None = None) -> str:
    """The exit status first, then each stream that printed something, as the model sees it.

    A limit the command ran into (with `wall_s`, the wall clock it had), and output cut to
    the limit, are each said in a line of their own, so that the model can tell them from
    the command's own failure.
    """
    if result.ended == "timeout":
        limit = f" of {wall_s:g} s" if wall_s is not None else ""
        head = (
            f"timed out: the wall-clock limit{limit} ran out and every process of the command "
            "was killed (a longer one: the call's timeout_s, up to the session's limit, which "
            "`bastion agent run --sandbox-timeout SECONDS` sets)"
        )
    elif result.ended == "signal":
        name = _SIGNAL_NAMES.get(result.signal or 0, f"signal {result.signal}")
        head = f"killed by {name} (exit status {result.exit_status})"
    else:
        head = f"exit status {result.exit_status}"
    parts = [head]
    if result.limit_hit:
        sentence = _LIMIT_SENTENCES.get(result.limit_hit, f"it hit the {result.limit_hit} limit")
        parts.append(f"limit: {sentence}")
    if result.stdout_cut:
        parts.append(_cut("stdout", result.stdout_cut))
    if result.stderr_cut:
        parts.append(_cut("stderr", result.stderr_cut))
    if result.stdout:
        parts.append("--- stdout\n" + result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("--- stderr\n" + result.stderr.rstrip("\n"))
    if result.connections:
        # A blank line first: what follows is Bastion's record, not the command's output.
        parts.append("\n" + result.connections)
    return "\n".join(parts)


def _judge(call: Call) -> PolicyRequest:
    """The session as the policy judges it, for the paths a listing or search would show."""
    session = call.session
    return PolicyRequest(
        session_id=session.session_id,
        tenant=session.tenant,
        agent=session.agent,
        autonomy=session.autonomy,
        tool=call.tool.name,
        effect="read",
        tainted=is_tainted(session, datetime.now(UTC)),
        skill_approvals=session.skill_approvals,
    )


def in_sandbox(call: Call, limits: Limits) -> dict[str, Any]:
    """What a command and a check ask of the session's sandbox alike."""
    session = call.session
    return call.whose() | {
        "workspace": call.workspace,
        "backend": session.sandbox,
        "network": session.network,
        "limits": limits,
        "read_only_dirs": session.read_only_dirs,
    }


async def run_shell(call: Call, given: ShellInput) -> str:
    """`shell`: the command in the sandbox, within the wall clock it asked for (up to the
    session's), and its result as the model is shown it; a streamed call has its output
    published as it comes too (`bastion.sandbox.streaming`)."""
    session = call.session
    limits = msgspec.structs.replace(session.limits, wall_s=shell_wall_s(session, given.timeout_s))
    result = await call.ask(
        subjects.SANDBOX_EXEC,
        ExecRequest(
            command=given.command,
            call_id=call.call_id,
            stream=call.stream,
            **in_sandbox(call, limits),
        ),
        ExecResult,
        timeout_s=limits.wall_s + call.timeout_s,
    )
    text = format_exec_result(result, limits.wall_s)
    if given.timeout_s is not None and given.timeout_s > session.limits.wall_s:
        text = (
            f"[timeout_s {given.timeout_s:g} is more than this session's wall-clock limit of "
            f"{session.limits.wall_s:g} s, so the command had {session.limits.wall_s:g}"
            " s; a session opened with `--sandbox-timeout SECONDS` has more]\n" + text
        )
    return text


async def run_check(call: Call, given: DiagnosticsInput | RunTestsInput) -> str:
    """`diagnostics` and `run_tests`: the project's checker or tests, and their report."""
    limits = call.session.limits
    what: Literal["diagnostics", "tests"] = (
        "diagnostics" if isinstance(given, DiagnosticsInput) else "tests"
    )
    report = await call.ask(
        subjects.SANDBOX_CHECK_CODE,
        CodeCheck(what=what, call_id=call.call_id, **in_sandbox(call, limits)),
        CodeReport,
        timeout_s=limits.wall_s + call.timeout_s,
    )
    return report.text


async def run_file_tool(call: Call, given: msgspec.Struct) -> str:
    """A file tool: its input in the `sandbox.files` request that carries it."""
    judged = {"judge": _judge(call)} if isinstance(given, _SHOWING_PATHS) else {}
    message = FILE_REQUESTS[type(given)](
        **call.whose(), workspace=call.workspace, input=given, **judged
    )
    answer = await call.ask(subjects.SANDBOX_FILES, message, FileResult)
    return answer.text
