"""The options a session is opened with, one definition for `agent run` and `token create`.

`bastion agent run` opens a session with them; `bastion token create` keeps them as the
profile of every session a front-door client opens with the token.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

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


def add_session_options(parser: argparse.ArgumentParser) -> None:
    """Every option of a session's opening but `--agent` (whose default differs)."""
    parser.add_argument("--workspace", metavar="DIR", help="the directory the tools work in")
    parser.add_argument("--shell", action="store_true", help="give the agent a shell tool")
    parser.add_argument(
        "--autonomy",
        choices=AUTONOMY_LEVELS,
        default="L2",
        help="what runs without asking (default L2: reads run, writes ask)",
    )
    parser.add_argument("--tenant", default="default", help="the tenant the session is for")
    parser.add_argument(
        "--sandbox",
        default="bwrap",
        metavar="BACKEND",
        help="bwrap (default) or docker:<image>@sha256:<digest>",
    )
    parser.add_argument(
        "--network", default="none", help="none (default), declared, host, or a Docker network"
    )
    parser.add_argument(
        "--web",
        action="store_true",
        help="offer fetch_url (public pages through the egress service; taints the session)",
    )
    parser.add_argument(
        "--mcp",
        action="extend",
        nargs="+",
        default=[],
        metavar="SERVER",
        help="give the session the reviewed tools of this MCP server, as SERVER_TOOL (repeatable)",
    )
    parser.add_argument(
        "--sandbox-read",
        action="append",
        default=[],
        metavar="DIR",
        help="show DIR read-only in the sandbox at its own path (repeatable)",
    )
    parser.add_argument(
        "--skills-dir", metavar="DIR", help="the skills directory (apart from the workspace)"
    )
    parser.add_argument(
        "--no-ask",
        action="store_true",
        help="nobody answers approvals: a call that would ask is refused at once",
    )
    parser.add_argument(
        "--no-skill-approvals",
        action="store_true",
        help="skills' allowed-tools pre-approve nothing: the level alone decides",
    )
    add_limit_options(parser)
