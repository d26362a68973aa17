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
and print commits. Everything else git does — `status` and `diff` (which run
`core.fsmonitor`), `show`, commits, checkouts and fetches (hooks, filters, helpers),
aliases — asks.

`sed`, `tar` and `awk` likewise take only the options of an allow-list (`_SED_OPTIONS`,
`_TAR_OPTIONS`, `_AWK_OPTIONS`), read as getopt reads them, clustered letters one by one
and knowing which options take a value, so that `sed -nl 1p 'e id'` is not read as the
script `1p`; any other option asks, its name in the reason.
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


class _Options:
    """The options a rule may cover for one program: flags, and those taking a value."""

    def __init__(
        self,
        flags: str,
        valued: str,
        long_flags: frozenset[str],
        long_valued: frozenset[str],
        purpose: str,
    ) -> None:
        self.flags = frozenset(flags)
        self.valued = frozenset(valued)
        self.long_flags = long_flags
        self.long_valued = long_valued
        self.purpose = purpose


_SED_OPTIONS: Final = _Options(
    flags="nErsuz",
    valued="e",
    long_flags=frozenset(
        {
            "--quiet",
            "--silent",
            "--regexp-extended",
            "--separate",
            "--unbuffered",
            "--null-data",
            "--posix",
            "--sandbox",
        }
    ),
    long_valued=frozenset({"--expression"}),
    purpose="print or substitute (no -i, -f, -l, --follow-symlinks)",
)
"""sed's options a rule may cover; `-e`/`--expression` give a script, checked as any."""

_TAR_OPTIONS: Final = _Options(
    flags="tvzjJ",
    valued="f",
    long_flags=frozenset({"--list", "--verbose", "--gzip", "--bzip2", "--xz", "--zstd"}),
    long_valued=frozenset({"--file"}),
    purpose="list an archive (-t, -v, -z, -j, -J, -f FILE)",
)
"""tar's options a rule may cover: listing one archive, decompressed by a built-in name."""

_AWK_OPTIONS: Final = _Options(
    flags="",
    valued="Fv",
    long_flags=frozenset(),
    long_valued=frozenset(),
    purpose="set the field separator or a variable (-F SEP, -v VAR=VAL)",
)
"""awk's options a rule may cover: `-v` values are data; `-f`, `-W`, `-E`, `--exec`… ask."""

_AWKS: Final = frozenset({"awk", "gawk", "mawk", "nawk", "busybox-awk"})
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


def _unknown(program: str, option: str, word: str, allowed: _Options) -> str:
    shown = repr(option) if option == word else f"{option!r} (in {word!r})"
    return (
        f"{program}'s {shown} is not among the options a rule may cover, which only "
        f"{allowed.purpose}"
    )


def _parse(
    program: str, args: Sequence[str], allowed: _Options, *, old_style: bool = False
) -> tuple[list[tuple[str, str | None]], list[str]] | str:
    """`args` read as getopt reads them, options anywhere before a `--` and short ones
    clustered (`-nl 1p` is `-n -l 1p`): the options given, each with its value (None for a
    flag), and the operands, or why an option is not one of `allowed`. With `old_style`
    (tar), a first word without a dash is a cluster of letters whose value-taking ones
    take the next words in turn."""
    values: list[tuple[str, str | None]] = []
    operands: list[str] = []
    rest = list(args)
    missing = f"{program}'s option takes a value that the command does not give"
    if old_style and rest and not rest[0].startswith("-"):
        cluster = rest.pop(0)
        for letter in cluster:
            if letter in allowed.valued:
                if not rest:
                    return missing
                values.append(("-" + letter, rest.pop(0)))
            elif letter in allowed.flags:
                values.append(("-" + letter, None))
            else:
                return _unknown(program, letter, cluster, allowed)
    while rest:
        word = rest.pop(0)
        if word == "--":
            operands += rest
            break
        if word.startswith("--"):
            name, given, value = word.partition("=")
            if name in allowed.long_valued:
                if not given:
                    if not rest:
                        return missing
                    value = rest.pop(0)
                values.append((name, value))
            elif name in allowed.long_flags and not given:
                values.append((name, None))
            else:
                return _unknown(program, name, word, allowed)
        elif word.startswith("-") and word != "-":
            for index, letter in enumerate(word[1:], start=2):
                if letter in allowed.valued:
                    value = word[index:] or (rest.pop(0) if rest else "")
                    if not value:
                        return missing
                    values.append(("-" + letter, value))
                    break
                if letter not in allowed.flags:
                    return _unknown(program, "-" + letter, word, allowed)
                values.append(("-" + letter, None))
        else:
            operands.append(word)
    return values, operands


def _sed(args: Sequence[str]) -> str | None:
    parsed = _parse("sed", args, _SED_OPTIONS)
    if isinstance(parsed, str):
        return parsed
    values, operands = parsed
    scripts = [value for _, value in values if value is not None] or operands[:1]
    for script in scripts:
        if _SED_SCRIPT.fullmatch(script) is None:
            return (
                f"the sed script {script!r} is not one of p, d, q, = or s/…/…/ with flags "
                "g, p, i or a number (w, e and r write files or run commands)"
            )
    return None


def _tar(args: Sequence[str]) -> str | None:
    parsed = _parse("tar", args, _TAR_OPTIONS, old_style=True)
    if isinstance(parsed, str):
        return parsed
    for _, archive in parsed[0]:
        if archive is not None and ":" in archive:
            return f"tar's archive {archive!r} may name a remote one, reached by running rsh"
    listing = any(option in ("-t", "--list") for option, _ in parsed[0])
    return None if listing else "tar is pre-approved only to list an archive (-t, --list)"


def _awk(args: Sequence[str]) -> str | None:
    parsed = _parse("awk", args, _AWK_OPTIONS)
    if isinstance(parsed, str):
        return parsed
    for word in args:
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
