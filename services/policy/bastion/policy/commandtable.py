"""The table of commands and options a command rule never covers, and why.

A command rule (`Bash(git log:*)`, `Bash(npm test)`) names a program doing one thing. Some
programs take options that make them write files or run other programs (`git log
--output=…`, `find -exec`, `sed -i`, `tar --to-command`), some only run what their
arguments name (`xargs`, `env`), and git runs programs that its configuration names, and
that configuration is in the workspace (`.git/config`, and `.gitconfig` in HOME, which is
the workspace). `refusal` reads a command, split into words as the shell would, and says
why no rule may let it run without asking, or None when nothing in the table objects.

Git is covered only for its read-only history commands (`GIT_SUBCOMMANDS`), with no
option before the subcommand but `--no-pager`, and none that writes a file, makes a
patch, stat or diff (diff drivers and textconv filters are configured programs), checks
signatures (gpg is one too) or opens a pager; a long option is refused under any
abbreviation git accepts (`--out=` for `--output`). `git log` takes, on top, only the
options of an allow-list (`_GIT_LOG_LONG`, `_GIT_LOG_SHORT`): those that choose, order
and print commits. Everything else git does — `status`
and `diff` (which run `core.fsmonitor`), `show`, commits, checkouts and fetches (hooks,
filters, helpers), aliases — asks.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["GIT_SUBCOMMANDS", "refusal", "words"]

_GLOBS: Final = frozenset("*?[{")
"""Characters the shell expands, outside quotes, into words the rule never saw."""

_EXPANSION: Final = "$"
"""Parameter expansion (`$Z`, `$1`, `$@`, `$$`, `${…}`, `$(…)`): refused anywhere outside
single quotes (double quotes expand it too), since `$Z--output=x` reaches the program as
`--output=x` when `Z` is unset, past any look at the words that start with `-`."""

RUNNERS: Final = frozenset(
    {
        ".",
        "bash",
        "builtin",
        "busybox",
        "chroot",
        "command",
        "curl",
        "dash",
        "doas",
        "env",
        "eval",
        "exec",
        "fish",
        "flock",
        "ionice",
        "ksh",
        "nice",
        "nohup",
        "npx",
        "nsenter",
        "parallel",
        "pipx",
        "rsync",
        "scp",
        "script",
        "setsid",
        "sh",
        "source",
        "ssh",
        "stdbuf",
        "strace",
        "su",
        "sudo",
        "taskset",
        "time",
        "timeout",
        "unshare",
        "uvx",
        "watch",
        "wget",
        "xargs",
        "zsh",
    }
)
"""Programs that run whatever their arguments name, copy or fetch files where they say, or
read a configuration file from HOME (curl's `.curlrc`, wget's `.wgetrc`)."""

SCRIPT_RUNNERS: Final = frozenset({"npm", "pnpm", "yarn", "bun", "pip", "pip3", "uv", "poetry"})
"""Package managers: most subcommands run the project's scripts or a package's build, so a
prefix rule covers only the subcommand it names (`Bash(npm test:*)`, not `Bash(npm:*)`)."""

_SCRIPT_RUNNER_OPTIONS: Final = (
    "--script-shell",
    "--node-options",
    "--call",
    "--userconfig",
    "--globalconfig",
    "--config-file",
    "--target",
    "--root",
    "--prefix",
    "--src",
)

GIT_SUBCOMMANDS: Final = frozenset(
    {"log", "shortlog", "rev-list", "rev-parse", "ls-tree", "cat-file", "describe", "version"}
)
"""Git's commands that read history and run no configured program unless told to."""

_GIT_LONG: Final = (
    "--output",
    "--output-directory",
    "--ext-diff",
    "--textconv",
    "--filters",
    "--patch",
    "--patch-with-stat",
    "--patch-with-raw",
    "--binary",
    "--function-context",
    "--inter-hunk-context",
    "--stat",
    "--stat-width",
    "--stat-name-width",
    "--stat-graph-width",
    "--stat-count",
    "--raw",
    "--name-only",
    "--name-status",
    "--full-index",
    "--numstat",
    "--shortstat",
    "--dirstat",
    "--dirstat-by-file",
    "--compact-summary",
    "--summary",
    "--cc",
    "--dd",
    "--remerge-diff",
    "--diff-merges",
    "--combined-all-paths",
    "--unified",
    "--word-diff",
    "--word-diff-regex",
    "--color-words",
    "--color-moved",
    "--color-moved-ws",
    "--full-diff",
    "--check",
    "--pickaxe-all",
    "--pickaxe-regex",
    "--show-signature",
    "--open-files-in-pager",
    "--paginate",
    "--exec-path",
    "--git-dir",
    "--work-tree",
    "--config-env",
    "--dirty",
    "--broken",
    "--line-porcelain",
    "--batch-command",
)
_GIT_SHORT: Final = frozenset("pucmSGLUOoWX")
_GIT_LOG_LONG: Final = frozenset(
    {
        "--abbrev",
        "--abbrev-commit",
        "--after",
        "--all",
        "--all-match",
        "--ancestry-path",
        "--author",
        "--author-date-order",
        "--basic-regexp",
        "--before",
        "--boundary",
        "--branches",
        "--cherry",
        "--cherry-mark",
        "--cherry-pick",
        "--children",
        "--color",
        "--committer",
        "--date",
        "--date-order",
        "--decorate",
        "--dense",
        "--do-walk",
        "--encoding",
        "--exclude",
        "--expand-tabs",
        "--extended-regexp",
        "--first-parent",
        "--fixed-strings",
        "--format",
        "--full-history",
        "--graph",
        "--grep",
        "--invert-grep",
        "--left-only",
        "--left-right",
        "--log-size",
        "--max-age",
        "--max-count",
        "--max-parents",
        "--merges",
        "--min-age",
        "--min-parents",
        "--no-abbrev",
        "--no-abbrev-commit",
        "--no-color",
        "--no-decorate",
        "--no-expand-tabs",
        "--no-merges",
        "--no-min-parents",
        "--no-max-parents",
        "--no-notes",
        "--no-patch",
        "--no-walk",
        "--not",
        "--null",
        "--oneline",
        "--parents",
        "--perl-regexp",
        "--pretty",
        "--regexp-ignore-case",
        "--relative-date",
        "--remotes",
        "--reverse",
        "--right-only",
        "--show-linear-break",
        "--simplify-by-decoration",
        "--simplify-merges",
        "--since",
        "--skip",
        "--source",
        "--sparse",
        "--tags",
        "--topo-order",
        "--until",
    }
)
"""`git log`'s options a rule may cover, named exactly (git would take an abbreviation of a
longer, refused option): the ones that choose, order and print commits. Every option
that diffs, writes, runs or pages (`--output`, `-p`, `--stat`, `--raw`, `--name-only`,
`--binary`, `-W`, `--follow`…) is missing, so asks, and so is every option added to git
later."""
_GIT_LOG_SHORT: Final = frozenset("niEFPzs0123456789")
"""`git log`'s short options a rule may cover: -n N, -<number>, -i, -E, -F, -P, -z, -s."""

_GIT_LISTING: Final = {"ls-tree": frozenset({"--name-only", "--name-status"})}
"""Options that make a diff elsewhere but only list names in the subcommand given."""
_GIT_FORMATS: Final = frozenset(
    {"oneline", "short", "medium", "full", "fuller", "reference", "raw"}
)
_GIT_FORMAT_OPTIONS: Final = ("--pretty", "--format")

_FIND_ACTIONS: Final = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)

_SED_SCRIPT: Final = re.compile(
    r"(?:(?:\d+|\$|/[^/]*/)(?:,(?:\d+|\$|/[^/]*/))?!?)?"
    r"(?:[pdq=]|s(?P<d>[^\w\s])(?:(?!(?P=d)).)*(?P=d)(?:(?!(?P=d)).)*(?P=d)[gpiI0-9]*)"
)
_SED_LONG: Final = ("--in-place", "--file", "--expression")

_TAR_MODES: Final = frozenset("cxruAd")
_TAR_LONG_MODES: Final = (
    "--create",
    "--extract",
    "--get",
    "--append",
    "--update",
    "--catenate",
    "--concatenate",
    "--delete",
    "--diff",
    "--compare",
)
_TAR_PROGRAMS: Final = (
    "--to-command",
    "--use-compress-program",
    "--checkpoint-action",
    "--rsh-command",
    "--info-script",
    "--new-volume-script",
    "--index-file",
)

_AWKS: Final = frozenset({"awk", "gawk", "mawk", "nawk", "busybox-awk"})
_AWK_LONG: Final = (
    "--file",
    "--include",
    "--load",
    "--exec",
    "--pretty-print",
    "--profile",
    "--dump-variables",
    "--debug",
)
_AWK_SHORT: Final = frozenset("filEopdD")
_AWK_WORDS: Final = ("system", "getline", "@load", "@include", "ENVIRON")


def words(command: str) -> list[str] | None:
    """`command` split into words as the shell splits it, or None when the shell would
    expand part of it (a `$` outside single quotes, an unquoted glob or brace, a `~`
    starting a word or following `=` or `:`, as in `--output=~/x`) or its quotes do not
    close."""
    quote = ""
    before = " "
    for char in command:
        if char == _EXPANSION and quote != "'":
            return None
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in _GLOBS or (char == "~" and before in " \t=:"):
            return None
        before = char
    try:
        return shlex.split(command, comments=False, posix=True)
    except ValueError:
        return None


def _long(word: str, names: Sequence[str]) -> str | None:
    """The option of `names` that `word` (`--name` or `--name=value`) names or abbreviates."""
    if not word.startswith("--") or word == "--":
        return None
    given = word.split("=", 1)[0]
    for name in names:
        if name.startswith(given) and len(given) > 2:
            return name
    return None


def _options(args: Sequence[str]) -> list[str]:
    """The words of `args` before a `--` that ends the options."""
    return list(args[: args.index("--")]) if "--" in args else list(args)


def _short_letters(word: str) -> str:
    return word[1:] if word.startswith("-") and not word.startswith("--") else ""


def _git(args: Sequence[str]) -> str | None:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        if rest[0] != "--no-pager":
            return (
                f"git's option {rest[0]!r} before the subcommand changes where git looks or "
                "what it runs"
            )
        rest.pop(0)
    if not rest or rest[0] not in GIT_SUBCOMMANDS:
        sub = rest[0] if rest else "(none)"
        return (
            f"`git {sub}` may run programs that git's configuration in the workspace names "
            f"(hooks, fsmonitor, diff drivers, aliases); only git "
            f"{', '.join(sorted(GIT_SUBCOMMANDS))} can be pre-approved"
        )
    listing = _GIT_LISTING.get(rest[0], frozenset())
    for word in _options(rest[1:]):
        name = _long(word, _GIT_LONG)
        if name is not None and name not in listing:
            return f"git's {word!r} ({name}) writes a file or runs a configured program"
        value = word.split("=", 1)[1] if "=" in word else None
        if _long(word, _GIT_FORMAT_OPTIONS) and value is not None:
            named = value.split(":", 1)[0]
            if "%G" in value or ("%" not in value and named not in _GIT_FORMATS):
                return (
                    f"git's {word!r} checks signatures with gpg, or names a format the "
                    "configuration defines"
                )
        letters = _short_letters(word)
        if set(letters) & (_GIT_SHORT - ({"p"} if rest[0] == "cat-file" else set())):
            return f"git's {word!r} makes a patch or runs a configured program"
        unknown = _git_log_unknown(word) if rest[0] == "log" else None
        if unknown is not None:
            return unknown
    return None


def _git_log_unknown(word: str) -> str | None:
    """Why `git log`'s `word` is not one of the options a rule may cover, or None."""
    if word.startswith("--"):
        known = word.split("=", 1)[0] in _GIT_LOG_LONG
    else:
        known = set(_short_letters(word)) <= _GIT_LOG_SHORT
    if known:
        return None
    return (
        f"git log's {word!r} is not among the options known to only choose and print "
        "commits (it may make a diff, write a file or run a configured program)"
    )


def _find(args: Sequence[str]) -> str | None:
    for word in args:
        if word in _FIND_ACTIONS:
            return f"find's {word} runs a program, deletes or writes a file"
    return None


def _sed(args: Sequence[str]) -> str | None:
    scripts: list[str] = []
    take_script = False
    for word in _options(args):
        if take_script:
            scripts.append(word)
            take_script = False
            continue
        name = _long(word, _SED_LONG)
        if name == "--expression":
            if "=" in word:
                scripts.append(word.split("=", 1)[1])
            else:
                take_script = True
            continue
        if name is not None:
            return f"sed's {word!r} edits files in place or reads a script from a file"
        letters = _short_letters(word)
        if set(letters) & {"i", "f"}:
            return f"sed's {word!r} edits files in place or reads a script from a file"
        if "e" in letters:
            if not letters.endswith("e"):
                return f"sed's {word!r} holds a script this table cannot read"
            take_script = True
    if not scripts:
        operands = [w for w in args if not w.startswith("-")]
        scripts = operands[:1]
    for script in scripts:
        if _SED_SCRIPT.fullmatch(script) is None:
            return (
                f"the sed script {script!r} is not one of p, d, q, = or s/…/…/ with flags "
                "g, p, i or a number (w, e and r write files or run commands)"
            )
    return None


def _tar(args: Sequence[str]) -> str | None:
    listing = False
    for index, word in enumerate(args):
        letters = _short_letters(word) or (word if index == 0 and word[:1] != "-" else "")
        if set(letters) & (_TAR_MODES | {"I", "F"}) or _long(
            word, (*_TAR_LONG_MODES, *_TAR_PROGRAMS)
        ):
            return f"tar's {word!r} writes files or runs a program"
        if ":" in word:
            return f"tar's {word!r} may name a remote archive, reached by running rsh"
        listing = listing or "t" in letters or _long(word, ("--list",)) is not None
    return None if listing else "tar is pre-approved only to list an archive (-t, --list)"


def _awk(args: Sequence[str]) -> str | None:
    for word in args:
        if _long(word, _AWK_LONG) or set(_short_letters(word)) & _AWK_SHORT:
            return f"awk's {word!r} loads code, or writes a file"
        for risky in _AWK_WORDS:
            if risky in word:
                return f"the awk program uses {risky}, which runs commands or reads the environment"
    return None


def _script_runner(program: str, args: Sequence[str], named: int) -> str | None:
    if named < 2:
        return (
            f"{program} runs the project's scripts or a package's build for most of its "
            f"subcommands: a rule must name the subcommand, as in Bash({program} test:*)"
        )
    for word in args:
        name = _long(word, _SCRIPT_RUNNER_OPTIONS)
        if name is not None or word == "-c":
            return f"{program}'s {word!r} runs a program it names or writes elsewhere"
    return None


def _sort(args: Sequence[str]) -> str | None:
    for word in args:
        name = _long(word, ("--output", "--compress-program"))
        if name is not None or (_short_letters(word) and "o" in _short_letters(word)):
            return f"sort's {word!r} writes a file or runs a program"
    return None


def _uniq(args: Sequence[str]) -> str | None:
    operands = [w for w in _options(args) if not w.startswith("-")]
    operands += list(args[args.index("--") + 1 :]) if "--" in args else []
    if len(operands) > 1:
        return f"uniq writes its output to its second operand, {operands[1]!r}"
    return None


_CHECKS: Final[dict[str, Callable[[Sequence[str]], str | None]]] = {
    "git": _git,
    "find": _find,
    "sed": _sed,
    "gsed": _sed,
    "tar": _tar,
    "gtar": _tar,
    "bsdtar": _tar,
    **dict.fromkeys(_AWKS, _awk),
    "sort": _sort,
    "uniq": _uniq,
}


def refusal(command: Sequence[str], named: int) -> str | None:
    """Why no command rule covers `command` (its words), whose first `named` words the rule
    itself names; None when the table has nothing against it."""
    if not command:
        return "an empty command runs nothing a rule names"
    if "=" in command[0] and not command[0].startswith("="):
        return (
            f"{command[0]!r} sets a variable for the program that follows, which can change "
            "what it runs"
        )
    program = posixpath.basename(command[0])
    if program in RUNNERS:
        return (
            f"{program} runs the program its arguments name, writes where they say, or "
            "reads its configuration from the workspace"
        )
    if program in SCRIPT_RUNNERS:
        return _script_runner(program, command[1:], named)
    check = _CHECKS.get(program)
    return check(command[1:]) if check is not None else None
