"""The options a session is opened with, one definition for `agent run` and `token create`.

`bastion agent run` opens a session with them; `bastion token create` keeps them as the
profile of every session a front-door client opens with the token.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bastion.cli.common import add_repeatable
from bastion.cli.limits import add_limit_options, session_limits
from bastion.proto.policy import AUTONOMY_LEVELS

__all__ = ["add_session_options", "session_fields"]


def _absolute(directory: str) -> str:
    """A directory as the services need it: absolute, from wherever the CLI runs."""
    return str(Path(directory).expanduser().absolute())


def session_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The `OpenSession` fields (all but `agent`) the options of `add_session_options` gave.

    Raises:
        ValueError: a limit is out of its bounds, or the workspace is not a directory; the
            sentence says which.
    """
    limits = session_limits(args.sandbox_timeout, args.sandbox_limit)
    workspace = None
    if args.workspace:
        if not Path(args.workspace).is_dir():
            raise ValueError(f"the workspace {args.workspace} is not a directory: create it first")
        workspace = str(Path(args.workspace).expanduser().resolve())
    return {
        "tenant": args.tenant,
        "autonomy": args.autonomy,
        "workspace": workspace,
        "shell": args.shell,
        "sandbox": args.sandbox,
        "network": args.network,
        "read_only_dirs": tuple(_absolute(d) for d in args.sandbox_read),
        "skills_dir": _absolute(args.skills_dir) if args.skills_dir else None,
        "limits": limits,
        "skill_approvals": not args.no_skill_approvals,
        "ask": not args.no_ask,
        "web": args.web,
        "mcp": tuple(dict.fromkeys(args.mcp)),
    }


_SWITCHES: tuple[tuple[str, str], ...] = (
    ("--shell", "give the agent a shell tool"),
    ("--web", "offer fetch_url (public pages through the egress service; taints the session)"),
    ("--no-ask", "nobody answers approvals: a call that would ask is refused at once"),
    ("--no-skill-approvals", "skills' allowed-tools pre-approve nothing: the level alone decides"),
)
"""The options that are on or off, and what each turns on."""

_VALUES: tuple[tuple[str, str | None, str | None, str], ...] = (
    ("--workspace", None, "DIR", "the directory the tools work in"),
    ("--tenant", "default", None, "the tenant the session is for"),
    ("--sandbox", "bwrap", "BACKEND", "bwrap (default) or docker:<image>@sha256:<digest>"),
    ("--network", "none", None, "none (default), declared, host, or a Docker network"),
    ("--skills-dir", None, "DIR", "the skills directory (apart from the workspace)"),
)
"""The options that take one value: flag, default, metavar, help."""


def add_session_options(parser: argparse.ArgumentParser) -> None:
    """Every option of a session's opening but `--agent` (whose default differs)."""
    for flag, default, metavar, text in _VALUES:
        parser.add_argument(flag, default=default, metavar=metavar, help=text)
    for flag, text in _SWITCHES:
        parser.add_argument(flag, action="store_true", help=text)
    parser.add_argument(
        "--autonomy",
        choices=AUTONOMY_LEVELS,
        default="L2",
        help="what runs without asking (default L2: reads run, writes ask)",
    )
    parser.add_argument(
        "--mcp",
        action="extend",
        nargs="+",
        default=[],
        metavar="SERVER",
        help="give the session the reviewed tools of this MCP server, as SERVER_TOOL (repeatable)",
    )
    add_repeatable(
        parser,
        "--sandbox-read",
        "DIR",
        "show DIR read-only in the sandbox at its own path (repeatable)",
    )
    add_limit_options(parser)
