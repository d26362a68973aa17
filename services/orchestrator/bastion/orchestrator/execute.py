"""Running an allowed call on the service that owns it, and the text the model is shown."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from bastion.orchestrator.taint import is_tainted
from bastion.orchestrator.web import fetch_page, search_web
from bastion.proto import subjects
from bastion.proto.policy import PolicyRequest
from bastion.proto.sandbox import (
    ApplyPatch,
    CodeCheck,
    CodeReport,
    EditFile,
    ExecRequest,
    ExecResult,
    FileResult,
    FindFiles,
    ListFiles,
    ReadFile,
    SearchFiles,
    WriteFile,
)
from bastion.proto.session import SessionInfo
from bastion.proto.toolinput import (
    ApplyPatchInput,
    DiagnosticsInput,
    EditFileInput,
    FetchUrlInput,
    FindFilesInput,
    ListFilesInput,
    ReadFileInput,
    RunTestsInput,
    SearchFilesInput,
    ShellInput,
    WebSearchInput,
    WriteFileInput,
)
from bastion.shared.bus import Client, request
from bastion.shared.deadlines import shell_wall_s

__all__ = ["format_exec_result", "run_tool"]

_FILE_REQUESTS: dict[type[msgspec.Struct], type[msgspec.Struct]] = {
    ReadFileInput: ReadFile,
    WriteFileInput: WriteFile,
    EditFileInput: EditFile,
    ApplyPatchInput: ApplyPatch,
    ListFilesInput: ListFiles,
    FindFilesInput: FindFiles,
    SearchFilesInput: SearchFiles,
}
"""Each file tool's input and the `sandbox.files` request it becomes (same field names)."""
_SHOWING_PATHS: tuple[type[msgspec.Struct], ...] = (
    ListFilesInput,
    FindFilesInput,
    SearchFilesInput,
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


def _judge(session: SessionInfo, tool: str) -> PolicyRequest:
    """The session as the policy judges it, for the paths a listing or search would show."""
    return PolicyRequest(
        session_id=session.session_id,
        tenant=session.tenant,
        agent=session.agent,
        autonomy=session.autonomy,
        tool=tool,
        effect="read",
        tainted=is_tainted(session, datetime.now(UTC)),
        skill_approvals=session.skill_approvals,
    )


async def run_tool(
    client: Client,
    session: SessionInfo,
    tool: str,
    tool_input: msgspec.Struct,
    timeout_s: float,
) -> str:
    """Run `tool` for `session` and return its text; errors are raised typed."""
    if isinstance(tool_input, FetchUrlInput):
        return await fetch_page(client, session, tool_input, timeout_s)
    if isinstance(tool_input, WebSearchInput):
        return await search_web(client, session, tool_input, timeout_s)
    assert session.workspace is not None  # only workspace sessions have these tools
    match tool_input:
        case ShellInput(command=command, timeout_s=asked_s):
            limits = msgspec.structs.replace(session.limits, wall_s=shell_wall_s(session, asked_s))
            result: ExecResult = await request(
                client,
                subjects.SANDBOX_EXEC,
                ExecRequest(
                    session_id=session.session_id,
                    workspace=session.workspace,
                    command=command,
                    backend=session.sandbox,
                    network=session.network,
                    limits=limits,
                    read_only_dirs=session.read_only_dirs,
                    tenant=session.tenant,
                ),
                ExecResult,
                timeout_s=limits.wall_s + timeout_s,
            )
            text = format_exec_result(result, limits.wall_s)
            if asked_s is not None and asked_s > session.limits.wall_s:
                text = (
                    f"[timeout_s {asked_s:g} is more than this session's wall-clock limit of "
                    f"{session.limits.wall_s:g} s, so the command had {session.limits.wall_s:g}"
                    " s; a session opened with `--sandbox-timeout SECONDS` has more]\n" + text
                )
            return text
        case DiagnosticsInput() | RunTestsInput():
            limits = session.limits
            report: CodeReport = await request(
                client,
                subjects.SANDBOX_CHECK_CODE,
                CodeCheck(
                    session_id=session.session_id,
                    workspace=session.workspace,
                    what="diagnostics" if isinstance(tool_input, DiagnosticsInput) else "tests",
                    backend=session.sandbox,
                    network=session.network,
                    limits=limits,
                    read_only_dirs=session.read_only_dirs,
                    tenant=session.tenant,
                ),
                CodeReport,
                timeout_s=limits.wall_s + timeout_s,
            )
            return report.text
    wire = _FILE_REQUESTS.get(type(tool_input))
    if wire is None:
        raise AssertionError(f"no route for tool {tool}")
    fields = msgspec.structs.asdict(tool_input)
    if isinstance(tool_input, _SHOWING_PATHS):
        fields["judge"] = _judge(session, tool)
    answer: FileResult = await request(
        client,
        subjects.SANDBOX_FILES,
        wire(
            session_id=session.session_id,
            workspace=session.workspace,
            tenant=session.tenant,
            **fields,
        ),
        FileResult,
        timeout_s=timeout_s,
    )
    return answer.text
