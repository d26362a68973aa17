"""`bastion agent run`: drive a session from a scripted list of tool calls, printing the transcript.

A script is a JSON array of steps. Each step is `{"tool": NAME, "input": {...}}`; the last
may instead be `{"say": TEXT}`, the agent's final message. `--script -` reads standard
input. This is how examples and end-to-end tests run a session with no model.

A call that waits for a person stops the run (exit status 3): the rest of the script is
kept, the session stays open, and `bastion agent continue SESSION --approve|--decline WHY`
carries on. A step that ended in an error of Bastion's makes it exit 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

from bastion.cli.common import (
    add_documented,
    add_location_options,
    add_output_option,
    add_repeatable,
    add_verbs,
    bus,
    fail,
    state_dir_of,
)
from bastion.cli.driving import CALL_MARGIN_S, drive, mark_run
from bastion.cli.limits import add_limit_options, session_limits
from bastion.cli.resume import add_continue_parser
from bastion.cli.runrecord import RunRecord, recorded
from bastion.cli.script import ScriptError, Step, load_script
from bastion.cli.transcript import say
from bastion.proto import subjects
from bastion.proto.hooks import RunMark
from bastion.proto.policy import AUTONOMY_LEVELS
from bastion.proto.session import OpenSession, SessionInfo, SessionLimits
from bastion.shared.bus import request
from bastion.shared.carry import carried

__all__ = ["Step", "add_parser", "load_script"]

_AS_GIVEN = ("agent", "tenant", "autonomy", "shell", "sandbox", "network", "web")
"""The session's options that go from `bastion agent run`'s flags to the session as given."""


def _absolute(directory: str) -> str:
    """A directory as the services need it: absolute, from wherever the CLI runs."""
    return str(Path(directory).expanduser().absolute())


async def _run(
    args: argparse.Namespace,
    steps: list[Step],
    workspace: str | None,
    limits: SessionLimits,
    record: RunRecord,
) -> int:
    async with bus(args, "bastion-agent") as client:
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(
                workspace=workspace,
                read_only_dirs=tuple(_absolute(d) for d in args.sandbox_read),
                skills_dir=_absolute(args.skills_dir) if args.skills_dir else None,
                limits=limits,
                skill_approvals=not args.no_skill_approvals,
                ask=not args.no_ask,
                mcp=tuple(dict.fromkeys(args.mcp)),
                **carried(args, _AS_GIVEN),
            ),
            SessionInfo,
            timeout_s=CALL_MARGIN_S,
        )
        say(f"session {session.session_id} for agent {session.agent}")
        record.session_id = session.session_id
        for notice in session.notices:
            say(notice)
        for note in await mark_run(
            client, RunMark(session_id=session.session_id, event="run_start")
        ):
            say(note)
        return await drive(client, session, steps, state_dir_of(args), record)


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
    return recorded(
        args.output, lambda record: anyio.run(_run, args, steps, workspace, limits, record)
    )


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(commands, "agent", help="drive sessions as an agent would")
    run_parser = add_documented(
        verbs,
        "run",
        "open a session, make each tool call of a script, print the transcript",
        __doc__ or "",
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
        "--web",
        action="store_true",
        help="offer fetch_url (public pages through the egress service; taints the session)",
    )
    add_repeatable(
        run_parser,
        "--mcp",
        "SERVER",
        "give the session the reviewed tools of this MCP server, as SERVER_TOOL (repeatable)",
    )
    add_repeatable(
        run_parser,
        "--sandbox-read",
        "DIR",
        "show DIR read-only in the sandbox at its own path (repeatable)",
    )
    run_parser.add_argument(
        "--skills-dir", metavar="DIR", help="the skills directory (apart from the workspace)"
    )
    run_parser.add_argument(
        "--no-ask",
        action="store_true",
        help="nobody answers approvals: a call that would ask is refused at once",
    )
    run_parser.add_argument(
        "--no-skill-approvals",
        action="store_true",
        help="skills' allowed-tools pre-approve nothing: the level alone decides",
    )
    add_limit_options(run_parser)
    add_output_option(run_parser)
    add_location_options(run_parser)
    run_parser.set_defaults(handler=run)
    add_continue_parser(verbs)
