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
from typing import Any

import anyio

from bastion.cli.common import (
    add_documented,
    add_location_options,
    add_output_option,
    add_verbs,
    bus,
    fail,
    state_dir_of,
)
from bastion.cli.driving import CALL_MARGIN_S, drive
from bastion.cli.resume import add_continue_parser
from bastion.cli.runrecord import RunRecord, recorded
from bastion.cli.script import ScriptError, Step, load_script
from bastion.cli.sessionopts import add_session_options, session_fields
from bastion.cli.transcript import say
from bastion.proto import subjects
from bastion.proto.hooks import RunMark
from bastion.proto.session import OpenSession, SessionInfo
from bastion.shared.bus import request
from bastion.shared.runmarks import mark_run

__all__ = ["Step", "add_parser", "load_script"]


async def _run(
    args: argparse.Namespace,
    steps: list[Step],
    fields: dict[str, Any],
    record: RunRecord,
) -> int:
    async with bus(args, "bastion-agent") as client:
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(agent=args.agent, **fields),
            SessionInfo,
            timeout_s=CALL_MARGIN_S,
        )
        say(f"session {session.session_id} for agent {session.agent}")
        record.session_id = session.session_id
        for notice in session.notices:
            say(notice)
        for note in await mark_run(
            client, RunMark(session_id=session.session_id, event="run_start"), CALL_MARGIN_S
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
        fields = session_fields(args)
    except ValueError as error:
        return fail(str(error), 2)
    return recorded(args.output, lambda record: anyio.run(_run, args, steps, fields, record))


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
    run_parser.add_argument("--agent", default="scripted", help="the agent's name")
    add_session_options(run_parser)
    add_output_option(run_parser)
    add_location_options(run_parser)
    run_parser.set_defaults(handler=run)
    add_continue_parser(verbs)
