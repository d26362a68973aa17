"""`bastion hooks add|list|remove`: commands of the operator's run around calls and runs.

They are kept in `<state dir>/hooks.json` and run by the hook runner that `bastion up`
starts when that file exists (see `bastion.hooks`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import msgspec

from bastion.cli.common import (
    add_output_option,
    add_repeatable,
    add_verbs,
    fail,
    state_dir_of,
    write_items,
)
from bastion.shared.hookfile import (
    EVENTS,
    CommandHook,
    UnsafeHooksFile,
    hooks_path,
    load_hooks,
    save_hooks,
)

__all__ = ["add_parser"]


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")


def _describe(number: int, hook: CommandHook) -> str:
    tools = ",".join(hook.tools) if hook.tools else "*"
    tool_part = f" --tool {tools}" if hook.event in ("before-tool", "after-tool") else ""
    return (
        f"{number}. {hook.event}{tool_part} --timeout {hook.timeout_s:g} -- "
        f"{shlex.join(hook.command)}"
    )


def add(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        return fail("give the hook's command after --, e.g. -- /path/to/guard.sh", 2)
    if args.tool and args.event not in ("before-tool", "after-tool"):
        return fail(f"--tool is for tool hooks; a {args.event} hook runs for every run", 2)
    if not 0 < args.timeout <= 3600:
        return fail("--timeout is in seconds, more than 0 and at most 3600", 2)
    path = hooks_path(state_dir_of(args))
    existed = path.exists()
    try:
        hooks = load_hooks(path)
    except UnsafeHooksFile as error:
        return fail(error.message)
    hook = CommandHook(
        event=args.event, command=command, tools=list(args.tool), timeout_s=args.timeout
    )
    hooks.append(hook)
    save_hooks(path, hooks)
    _say(f"added {_describe(len(hooks), hook)}")
    if not existed:
        _say("restart `bastion up` if it is running: it starts the hook runner with the file")
    return 0


def list_hooks(args: argparse.Namespace) -> int:
    try:
        hooks = load_hooks(hooks_path(state_dir_of(args)))
    except UnsafeHooksFile as error:
        return fail(error.message)
    if args.output == "json":
        write_items(
            {"number": number, **msgspec.structs.asdict(hook)}
            for number, hook in enumerate(hooks, start=1)
        )
        return 0
    if not hooks:
        _say("no hooks: add one with `bastion hooks add --event EVENT -- COMMAND`")
    for number, hook in enumerate(hooks, start=1):
        _say(_describe(number, hook))
    return 0


def remove(args: argparse.Namespace) -> int:
    path = hooks_path(state_dir_of(args))
    try:
        hooks = load_hooks(path)
    except UnsafeHooksFile as error:
        return fail(error.message)
    if not 1 <= args.number <= len(hooks):
        return fail(f"there is no hook {args.number}: `bastion hooks list` numbers them", 2)
    gone = hooks.pop(args.number - 1)
    save_hooks(path, hooks)
    _say(f"removed {_describe(args.number, gone)}")
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(commands, "hooks", help="commands run around tool calls and runs")
    add_parser_ = verbs.add_parser("add", help="add a command hook")
    add_parser_.add_argument("--event", required=True, choices=EVENTS)
    add_repeatable(
        add_parser_,
        "--tool",
        "PATTERN",
        "a tool-name pattern (* any characters), repeatable; default every tool",
    )
    add_parser_.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS", help="default 30"
    )
    add_parser_.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    list_parser = verbs.add_parser("list", help="the hooks, numbered")
    add_output_option(list_parser)
    remove_parser = verbs.add_parser("remove", help="remove hook N (as listed)")
    remove_parser.add_argument("number", type=int)
    for parser, handler in ((add_parser_, add), (list_parser, list_hooks), (remove_parser, remove)):
        parser.add_argument("--state-dir", type=Path, default=None, help="the state directory")
        parser.set_defaults(handler=handler)
