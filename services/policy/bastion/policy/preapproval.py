"""The pre-approval grammar: parse a rule such as `Bash(git log:*)`, and match it to a call.

A rule is a tool name, alone (every call of that tool) or with an argument matched
against the call's target: a command prefix (`Bash(git log:*)`) or exact command
(`Bash(npm test)`), a path glob (`Write(notes/*)`, `*` within a directory, `**` across),
a directory and everything under it (`Write(notes:*)`), a domain and its subdomains
(`WebFetch(domain:docs.rs)`), or a skill's script (`skill_run(scripts/check.sh)`). Other
runtimes' names are accepted for the same tools (`Bash`, `Write`, `Edit`, `Read`, `Glob`,
`LS`, `Grep`, `WebFetch`). A rule that does not parse never matches anything.

A command rule matches words, not characters: the rule and the command are split as the
shell splits them, and the command's first words must be the rule's. A command that the
shell would expand (a `$` outside single quotes, an unquoted glob), or that
`commandtable` marks (an option that writes a file or runs a program, a program that runs
its arguments), is never covered.
"""

from __future__ import annotations

import functools
import posixpath
import re
from dataclasses import dataclass
from typing import Final, Literal

from bastion.policy.commandtable import refusal, words
from bastion.policy.tools import target_kind
from bastion.shared.errors import InvalidInput
from bastion.shared.hostnames import InvalidHostName, ascii_host
from bastion.shared.patterns import InvalidPattern, PathGlob, path_glob

__all__ = [
    "InvalidPreApproval",
    "Rule",
    "command_refusal",
    "covers",
    "exact_rule",
    "parse_rule",
    "parsed",
    "shell_metacharacter",
    "uncovered_because",
]

ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "Bash": ("shell", "bg_run"),
    "Write": ("write_file", "apply_patch"),
    "Edit": ("edit_file", "apply_patch"),
    "Read": ("read_file",),
    "Glob": ("find_files",),
    "LS": ("list_files",),
    "Grep": ("search_files",),
    "WebFetch": ("fetch_url",),
    "WebSearch": ("web_search",),
}
"""Other runtimes' tool names, and the Bastion tools each stands for."""

_METACHARACTERS: Final = (";", "&", "|", "`", "$(", "${", "<", ">", "\\", "\n", "\r")
_RULE: Final = re.compile(r"^(?P<name>[A-Za-z0-9_][A-Za-z0-9_.\-]*)(?:\((?P<arg>.*)\))?$", re.S)
_DOMAIN: Final = re.compile(
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9\-]{0,61}[a-z0-9])?)*$"
)

Kind = Literal["any", "prefix", "exact", "glob", "domain"]


class InvalidPreApproval(InvalidInput):
    """A pre-approval rule that does not parse; its message says what to write instead."""


@dataclass(frozen=True)
class Rule:
    """A parsed rule: the Bastion tools it names, and how it matches their target."""

    text: str
    tools: frozenset[str]
    kind: Kind
    argument: str = ""
    pattern: PathGlob | None = None
    words: tuple[str, ...] = ()
    """A command rule's words, split as the shell splits them."""


def shell_metacharacter(command: str) -> str | None:
    """The first character sequence of `command` that could run more than one program."""
    for sequence in _METACHARACTERS:
        if sequence in command:
            return sequence
    return None


def parse_rule(text: str) -> Rule:
    """`text` parsed as a pre-approval rule.

    Raises:
        InvalidPreApproval: `text` is not a rule; the sentence says why and what works.
    """
    stripped = text.strip()
    found = _RULE.match(stripped)
    if found is None:
        raise InvalidPreApproval(
            f"the pre-approval {text!r} is not a rule: write a tool name, alone or followed "
            "by its argument in parentheses, such as Bash(git log:*) or Write(notes/*)"
        )
    name, argument = found.group("name"), found.group("arg")
    tools = frozenset(ALIASES.get(name, (name,)))
    if argument is None:
        return Rule(stripped, tools, "any")
    argument = argument.strip()
    if not argument:
        raise InvalidPreApproval(
            f"the pre-approval {text!r} has empty parentheses: write {name} alone to cover "
            f"every call of it, or put what it covers between the parentheses"
        )
    kind = target_kind(next(iter(tools)))
    if kind == "command":
        return _command_rule(stripped, tools, argument)
    if kind in ("path", "script"):
        return _path_rule(stripped, tools, argument)
    if kind == "host":
        return _host_rule(stripped, tools, argument)
    raise InvalidPreApproval(
        f"the pre-approval {text!r} gives {name} an argument, but {name} is matched by name "
        f"only: write {name} alone to cover every call of it"
    )


def _command_rule(text: str, tools: frozenset[str], argument: str) -> Rule:
    prefix = argument.removesuffix(":*")
    kind: Kind = "prefix" if prefix != argument else "exact"
    prefix = prefix.strip()
    if not prefix:
        raise InvalidPreApproval(
            f"the pre-approval {text!r} has an empty command prefix: write the tool name "
            "alone to cover every command, or name the command, as in Bash(git log:*)"
        )
    bad = shell_metacharacter(prefix)
    if bad is not None:
        raise InvalidPreApproval(
            f"the pre-approval {text!r} holds {bad!r}, and a command holding it is never "
            "covered: name one plain command, as in Bash(git log:*)"
        )
    split = words(prefix)
    if not split:
        raise InvalidPreApproval(
            f"the pre-approval {text!r} holds an unclosed quote or a character the shell "
            "expands ($ outside single quotes, * ? [ { or a leading ~): name one plain "
            "command, as in Bash(git log:*)"
        )
    return Rule(text, tools, kind, prefix, words=tuple(split))


def _path_rule(text: str, tools: frozenset[str], argument: str) -> Rule:
    under = argument.removesuffix(":*")
    glob = argument if under == argument else under.rstrip("/") + "/**"
    if under != argument and not under.strip("/"):
        raise InvalidPreApproval(
            f"the pre-approval {text!r} names no directory: write the tool name alone to "
            "cover every path, or name the directory, as in Write(notes:*)"
        )
    if glob.startswith("/") or ".." in glob.split("/") or "\x00" in glob:
        raise InvalidPreApproval(
            f"the pre-approval {text!r} reaches outside the workspace: write a path relative "
            "to the workspace, without `..`, such as Write(notes/*)"
        )
    try:
        pattern = path_glob(glob, "plain")
    except InvalidPattern as error:
        raise InvalidPreApproval(f"the pre-approval {text!r} is refused: {error.message}") from None
    return Rule(text, tools, "glob", argument, pattern)


def _host_rule(text: str, tools: frozenset[str], argument: str) -> Rule:
    given = argument.strip()
    if not given.startswith("domain:"):
        domain = ""
    else:
        try:
            domain = ascii_host(given[len("domain:") :])
        except InvalidHostName as error:
            raise InvalidPreApproval(
                f"the pre-approval {text!r} is refused: {error.message}"
            ) from None
    if not _DOMAIN.match(domain):
        raise InvalidPreApproval(
            f"the pre-approval {text!r} names no domain: write domain: and a host name, "
            "as in WebFetch(domain:docs.rs), which also covers its subdomains"
        )
    return Rule(text, tools, "domain", domain)


def _workspace_path(target: str) -> str | None:
    """`target` as a normalised relative path, or None if it is not one inside the workspace."""
    if not target or target.startswith("/") or "\x00" in target:
        return None
    path = posixpath.normpath(target)
    if path == ".." or path.startswith("../"):
        return None
    return path


def command_refusal(command: str, named: int | None = None) -> str | None:
    """Why no command rule naming the first `named` words of `command` (all of them when
    None) covers it, or None when such a rule does."""
    sequence = shell_metacharacter(command)
    if sequence is not None:
        return f"it holds {sequence!r}, so it could run more than one program"
    split = words(command)
    if split is None:
        return (
            "the shell would expand part of it ($ outside single quotes, or * ? [ { or a "
            "leading ~ outside quotes), or a quote is left open"
        )
    return refusal(split, len(split) if named is None else named)


def _names(rule: Rule, command: str) -> bool:
    """Whether the command rule `rule` names `command`, before the table has its say."""
    if rule.kind == "exact":
        return command == rule.argument
    split = words(command)
    if split is not None:
        return tuple(split[: len(rule.words)]) == rule.words
    rest = command.removeprefix(rule.argument)
    return rest != command and (not rest or not (rest[0].isalnum() or rest[0] in "-_.=/"))


def _command_covered(rule: Rule, command: str) -> bool:
    named = len(rule.words) if rule.kind == "prefix" else None
    return _names(rule, command) and command_refusal(command, named) is None


def uncovered_because(rule: Rule, tool: str, command: str) -> str | None:
    """Why `rule`, a command rule naming `command`, does not cover it; None when it does
    or does not name it at all."""
    if tool not in rule.tools or rule.kind not in ("prefix", "exact") or not _names(rule, command):
        return None
    return command_refusal(command, len(rule.words) if rule.kind == "prefix" else None)


def covers(rule: Rule, tool: str, target: str) -> bool:
    """Whether `rule` lets a call of `tool` on `target` run without asking."""
    if tool not in rule.tools:
        return False
    if rule.kind == "any":
        return True
    if rule.kind in ("prefix", "exact"):
        return _command_covered(rule, target)
    if rule.kind == "domain":
        host = target.lower().rstrip(".")
        if not _DOMAIN.match(host):
            return False
        return host == rule.argument or host.endswith("." + rule.argument)
    path = _workspace_path(target)
    return path is not None and rule.pattern is not None and rule.pattern.match(path)


@functools.lru_cache(maxsize=4096)
def parsed(text: str) -> Rule | str:
    """`text` parsed, or the sentence saying why it is not a rule (cached: rules repeat)."""
    try:
        return parse_rule(text)
    except InvalidPreApproval as error:
        return error.message


def exact_rule(tool: str, target: str) -> Rule:
    """The rule that covers a call of `tool` on `target` and as little else as the grammar
    allows: the bare name of a tool without a target, else `tool(target)`.

    Raises:
        InvalidPreApproval: no rule covers just this call (a command that could run more
            than one program, a path holding a glob character); the sentence says so.
    """
    kind = target_kind(tool)
    if kind == "none":
        return parse_rule(tool)
    widening = target.endswith(":*") or (
        kind in ("path", "script") and any(c in target for c in "*?")
    )
    if widening or target != target.strip() or not target:
        raise InvalidPreApproval(
            f"no rule covers exactly this call of {tool} (its target {target[:80]!r} would "
            "read as a pattern): give a rule yourself, or approve it once"
        )
    why = command_refusal(target) if kind == "command" else None
    if why is not None:
        raise InvalidPreApproval(
            f"no rule can cover this command ({why}), so it cannot be approved always: "
            "approve it once instead"
        )
    argument = f"domain:{target}" if kind == "host" else target
    return parse_rule(f"{tool}({argument})")
