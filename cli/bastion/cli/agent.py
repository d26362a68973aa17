"""`bastion agent run`: drive a session from a scripted list of tool calls, printing the transcript.

A script is a JSON array of steps. Each step is `{"tool": NAME, "input": {...}}`; the last
may instead be `{"say": TEXT}`, the agent's final message. `--script -` reads standard
input. This is how examples and end-to-end tests run a session with no model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec

from bastion.cli.common import add_location_options, bus, fail
from bastion.cli.limits import add_limit_options, session_limits
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.hooks import RunMark, RunMarked
from bastion.proto.policy import AUTONOMY_LEVELS
from bastion.proto.session import OpenSession, SessionInfo, SessionLimits, SessionRef
from bastion.proto.tools import CallResult, ToolCall
from bastion.shared.bus import Client, request
from bastion.shared.errors import BastionError

__all__ = ["Step", "add_parser", "load_script"]

CALL_MARGIN_S = 30.0
"""Added to the session's wall-clock limit when waiting for a call's answer."""


class Step(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One step of a script: a tool call, or the agent's final message."""

    tool: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    say: str | None = None


class ScriptError(BastionError):
    pass


def load_script(text: str, source: str) -> list[Step]:
    """The steps of a script, or a `ScriptError` naming the step and what is wrong with it."""
    try:
        raw = msgspec.json.decode(text)
    except msgspec.DecodeError as error:
        raise ScriptError(f"{source} is not JSON: {error}") from None
    if not isinstance(raw, list):
        raise ScriptError(f"{source} must be a JSON array of steps, not a {type(raw).__name__}")
    steps: list[Step] = []
    for number, item in enumerate(raw, start=1):
        try:
            step = msgspec.convert(item, Step)
        except msgspec.ValidationError as error:
            raise ScriptError(
                f"step {number} of {source} is not a step: {error} "
                '(a step is {"tool": NAME, "input": {...}} or {"say": TEXT})'
            ) from None
        if (step.tool is None) == (step.say is None):
            raise ScriptError(
                f'step {number} of {source} must have exactly one of "tool" and "say"'
            )
        if step.say is not None and number != len(raw):
            raise ScriptError(f'step {number} of {source}: only the last step may be a "say"')
        steps.append(step)
    if not steps:
        raise ScriptError(f"{source} has no steps")
    return steps


def _show_input(tool_input: dict[str, Any]) -> str:
    return json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _show_result(result: CallResult) -> str:
    if isinstance(result, ErrorReply):
        return f"error ({result.code}): {result.message}"
    return result.text


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _call(client: Client, session: SessionInfo, step: Step) -> CallResult:
    assert step.tool is not None
    budget = session.limits.wall_s + CALL_MARGIN_S
    try:
        result: CallResult = await request(
            client,
            subjects.session_call(session.session_id),
            ToolCall(tool=step.tool, input=step.input),
            CallResult,
            timeout_s=budget,
        )
    except BastionError as error:
        return error.to_reply()
    return result


async def _mark(client: Client, mark: RunMark) -> tuple[str, ...]:
    """Tell the session a run starts or ends (its run hooks are asked); what they added.

    A run hook that fails does not stop the run: only before-tool hooks block.
    """
    try:
        marked: RunMarked = await request(
            client, subjects.SESSION_RUN, mark, RunMarked, timeout_s=CALL_MARGIN_S
        )
    except BastionError:
        return ()
    return marked.notes


def _absolute(directory: str) -> str:
    """A directory as the services need it: absolute, from wherever the CLI runs."""
    return str(Path(directory).expanduser().absolute())


async def _run(
    args: argparse.Namespace, steps: list[Step], workspace: str | None, limits: SessionLimits
) -> int:
    async with bus(args, "bastion-agent") as client:
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(
                agent=args.agent,
                tenant=args.tenant,
                autonomy=args.autonomy,
                workspace=workspace,
                shell=args.shell,
                sandbox=args.sandbox,
                network=args.network,
                read_only_dirs=tuple(_absolute(d) for d in args.sandbox_read),
                skills_dir=_absolute(args.skills_dir) if args.skills_dir else None,
                limits=limits,
            ),
            SessionInfo,
            timeout_s=CALL_MARGIN_S,
        )
        _say(f"session {session.session_id} for agent {session.agent}")
        for note in await _mark(client, RunMark(session_id=session.session_id, event="run_start")):
            _say(note)
        for step in steps:
            if step.say is not None:
                _say(f"agent: {step.say}")
                continue
            _say(f"→ {step.tool} {_show_input(step.input)}")
            _say(f"← {_show_result(await _call(client, session, step))}")
        await _mark(client, RunMark(session_id=session.session_id, event="run_end", ended="done"))
        await request(
            client,
            subjects.SESSION_CLOSE,
            SessionRef(session_id=session.session_id),
            SessionInfo,
            timeout_s=CALL_MARGIN_S,
        )
        _say(f"session {session.session_id}: done")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.script == "-":
        text, source = sys.stdin.read(), "the script on standard input"
    else:
        try:
            text, source = Path(args.script).read_text(), f"script {args.script}"
        except OSError as error:
            return fail(f"cannot read the script {args.script}: {error.strerror}", 2)
    try:
        steps = load_script(text, source)
    except ScriptError as error:
        return fail(error.message, 2)
    try:
        limits = session_limits(args.sandbox_timeout, args.sandbox_limit)
    except ValueError as error:
        return fail(str(error), 2)
    workspace = None
    if args.workspace:
        if not Path(args.workspace).is_dir():
            return fail(f"the workspace {args.workspace} is not a directory: create it first", 2)
        workspace = str(Path(args.workspace).expanduser().resolve())
    return anyio.run(_run, args, steps, workspace, limits)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = commands.add_parser("agent", help="drive sessions as an agent would")
    verbs = agent.add_subparsers(dest="verb", required=True)
    run_parser = verbs.add_parser(
        "run",
        help="open a session, make each tool call of a script, print the transcript",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run_parser.add_argument(
        "--script", required=True, metavar="FILE", help="the script (JSON), or - for stdin"
    )
    run_parser.add_argument("--workspace", metavar="DIR", help="the directory the tools work in")
    run_parser.add_argument("--shell", action="store_true", help="give the agent a shell tool")
    run_parser.add_argument(
        "--autonomy",
        choices=AUTONOMY_LEVELS,
        default="L2",
        help="what runs without asking (default L2: reads run, writes ask)",
    )
    run_parser.add_argument("--agent", default="scripted", help="the agent's name")
    run_parser.add_argument("--tenant", default="default", help="the tenant the session is for")
    run_parser.add_argument(
        "--sandbox",
        default="bwrap",
        metavar="BACKEND",
        help="bwrap (default) or docker:<image>@sha256:<digest>",
    )
    run_parser.add_argument(
        "--network", default="none", help="none (default), declared, host, or a Docker network"
    )
    run_parser.add_argument(
        "--sandbox-read",
        action="append",
        default=[],
        metavar="DIR",
        help="show DIR read-only in the sandbox at its own path (repeatable)",
    )
    run_parser.add_argument(
        "--skills-dir", metavar="DIR", help="the skills directory (apart from the workspace)"
    )
    add_limit_options(run_parser)
    add_location_options(run_parser)
    run_parser.set_defaults(handler=run)
