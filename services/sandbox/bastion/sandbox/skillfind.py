"""`skill_find`: the skills dir's skills and what each declares, or those matching words.

Each skill is read as `skill_read` reads it (`read_skill`: its SKILL.md confined to the
skills dir, at most `MAX_SKILL_BYTES`, its front matter and declarations checked); one that
cannot be read is answered with the sentence saying why, and nothing outside the skills
dir is opened: a skill's directory or SKILL.md that is a link leading out is named as such
and not read. Its scripts are the regular files under its `scripts/`, walked by descriptor
without following a link. A query's words match, case-insensitively, the words of each
skill's name, description and body that they begin; skills are ranked by how many of the
query's words they hold, then by where (name over description over body). Every part of
the answer is bounded: the entries looked at, the skills answered, the scripts listed.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from bastion.proto.sandbox import FindSkills, ReadSkill, SkillDocument, SkillEntry, SkillListing
from bastion.sandbox.skills import read_skill
from bastion.sandbox.workspace import shown
from bastion.shared.errors import InvalidInput, NotFound
from bastion.shared.redaction import Redactor
from bastion.shared.skillmatter import body_of

__all__ = [
    "MAX_FOUND",
    "MAX_LISTED",
    "MAX_SCRIPTS",
    "MAX_SKILLS_READ",
    "find_skills",
]

MAX_SKILLS_READ: Final = 200
"""Skills read for one answer (the first by name); `unread` says when there were more."""
MAX_ENTRIES_SEEN: Final = 4096
"""Entries of the skills dir looked at, skills or not."""
MAX_LISTED: Final = 50
"""Skills a listing answers."""
MAX_FOUND: Final = 10
"""Skills a search answers, best first."""
MAX_SCRIPTS: Final = 20
"""Scripts named per skill; `more_scripts` says when it has more."""
MAX_SCRIPT_DEPTH: Final = 3
"""Directories under `scripts/` walked into."""
MAX_DESCRIPTION: Final = 1024
MAX_EXCERPT: Final = 200
MAX_QUERY_WORDS: Final = 16

MAX_NAME: Final = 64
"""A skill's name is at most this long (`SkillName`), as `skill_read` takes it."""
_SKILL_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_WORD: Final = re.compile(r"\w+")
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SCRIPTS: Final = "scripts"


@dataclass(frozen=True)
class _Read:
    """A skill as read: its entry, and the words of its name, description and body."""

    entry: SkillEntry
    body: str = ""
    name_words: tuple[str, ...] = ()
    description_words: tuple[str, ...] = ()
    body_words: tuple[str, ...] = ()


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _sorted_words(*texts: str) -> tuple[str, ...]:
    return tuple(sorted({w for text in texts for w in _words(text)}))


def _holds(words: tuple[str, ...], prefix: str) -> bool:
    """Whether one of the sorted `words` begins with `prefix`."""
    at = bisect.bisect_left(words, prefix)
    return at < len(words) and words[at].startswith(prefix)


def _names(skills_dir: Path) -> tuple[list[str], bool]:
    """The skills dir's entries that may be skills (directories, or links), by name, and
    whether there were more than are read."""
    names: list[str] = []
    seen = 0
    try:
        with os.scandir(skills_dir) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES_SEEN:
                    return sorted(names)[:MAX_SKILLS_READ], True
                if len(entry.name) > MAX_NAME or not _SKILL_NAME.match(entry.name):
                    continue
                if entry.is_symlink() or entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
    except OSError as error:
        raise InvalidInput(
            f"the skills dir cannot be read ({error.strerror}): give the sandbox service's "
            "user read access to it"
        ) from None
    names.sort()
    return names[:MAX_SKILLS_READ], len(names) > MAX_SKILLS_READ


def _leads_out(skills_dir: Path, name: str) -> str:
    """Why skill `name` is not read, when its directory or SKILL.md is a link the read
    would refuse (in words about a workspace): one leading out of the skills dir (or, for
    the directory, to the skills dir itself), to nothing, or by an absolute path; else ""."""
    link = skills_dir / name
    return _link_problem(skills_dir, link, "its directory") or _link_problem(
        skills_dir, link / "SKILL.md", "its SKILL.md"
    )


def _link_problem(skills_dir: Path, path: Path, what: str) -> str:
    """Why the read would refuse `path` (`what` names it) if it is a link; else ""."""
    if not path.is_symlink():
        return ""
    target = _real(path)
    if not target.is_relative_to(skills_dir) or target == skills_dir:
        return f"{what} is a link leading out of the skills dir: it is not read"
    if not path.exists():
        return f"{what} is a link to nothing (a missing target, or a loop)"
    if os.readlink(path).startswith("/"):
        return (
            f"{what} is a link by an absolute path, which skill_read does not follow: make "
            "it a relative link inside the skills dir"
        )
    return ""


def _real(path: Path) -> Path:
    """`path` through its links, as far as they go (a loop's, where it comes round)."""
    return Path(os.path.realpath(path))


def _open_inside(skills_dir: Path, relative: Iterable[str]) -> int:
    """A descriptor of the directory `relative` under `skills_dir`, no component a link."""
    fd = os.open(skills_dir, _DIR_FLAGS)
    try:
        for part in relative:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        raise
    return fd


def _scripts(skills_dir: Path, name: str) -> tuple[tuple[str, ...], bool]:
    """The regular files under the skill's `scripts/` (never through a link), and whether
    it has more than are named."""
    skill_dir = _real(skills_dir / name)
    found: list[str] = []
    try:
        top = _open_inside(skills_dir, (*skill_dir.relative_to(skills_dir).parts, _SCRIPTS))
    except (OSError, ValueError):
        return (), False
    try:
        for where, dirs, files, fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            depth = 0 if where == "." else where.count("/")
            dirs[:] = sorted(dirs) if depth < MAX_SCRIPT_DEPTH else []
            for file in sorted(files):
                if not stat.S_ISREG(os.stat(file, dir_fd=fd, follow_symlinks=False).st_mode):
                    continue
                if len(found) == MAX_SCRIPTS:
                    return tuple(found), True
                inside = file if where == "." else f"{where.removeprefix('./')}/{file}"
                found.append(f"{_SCRIPTS}/{inside}")
    except OSError:
        return tuple(found), False
    finally:
        os.close(top)
    return tuple(found), False


def _flat(text: str, most: int) -> str:
    """`text` on one line, cut to `most` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= most else flat[: most - 1] + "…"


def _read(skills_dir: Path, session_id: str, name: str, redactor: Redactor | None) -> _Read | None:
    """Skill `name` as read, or None when its directory holds no SKILL.md (no skill); its
    text, description and problem cut of `redactor`'s values before they are flattened,
    shortened or looked in."""
    cut = redactor.redact if redactor else str
    problem = _leads_out(skills_dir, name)
    if problem:
        return _Read(SkillEntry(name=name, problem=problem), name_words=_sorted_words(name))
    request = ReadSkill(session_id=session_id, skills_dir=str(skills_dir), name=name)
    try:
        document: SkillDocument = read_skill(skills_dir, request)
    except NotFound:
        return None
    except InvalidInput as error:
        entry = SkillEntry(name=name, problem=_flat(cut(error.message), MAX_DESCRIPTION))
        return _Read(entry, name_words=_sorted_words(name))
    scripts, more = _scripts(skills_dir, name)
    description = _flat(cut(document.description), MAX_DESCRIPTION)
    entry = SkillEntry(
        name=name,
        description=description,
        allowed_tools=document.allowed_tools,
        network=document.network,
        secrets=document.secrets,
        timeout_s=document.timeout_s,
        scripts=scripts,
        more_scripts=more,
    )
    body = body_of(cut(document.text))
    return _Read(
        entry,
        body=body,
        name_words=_sorted_words(name, document.name),
        description_words=_sorted_words(description),
        body_words=_sorted_words(body),
    )


def _rank(read: _Read, query: list[str]) -> tuple[int, int]:
    """How many of the query's words the skill holds, and a score of where."""
    held = score = 0
    for word in query:
        where = (
            4 * _holds(read.name_words, word)
            + 2 * _holds(read.description_words, word)
            + _holds(read.body_words, word)
        )
        held += where > 0
        score += where
    return held, score


def _excerpt(body: str, query: list[str]) -> str:
    """The first line of `body` holding a word that a query word begins, cut short."""
    for line in body.splitlines():
        words = _words(line)
        if any(w.startswith(q) for q in query for w in words):
            return _flat(line, MAX_EXCERPT)
    return ""


def _query_words(query: str) -> list[str]:
    words = list(dict.fromkeys(_words(query)))[:MAX_QUERY_WORDS]
    if not words:
        raise InvalidInput(
            f"the query {shown(query)} holds no words: give words to look for in the skills' "
            "names, descriptions and instructions, or no query to list them all"
        )
    return words


def find_skills(
    skills_dir: Path, request: FindSkills, redactor: Redactor | None = None
) -> SkillListing:
    """The skills of `skills_dir` by name, or with `request.query` those holding its words,
    best first; at most `MAX_LISTED` (`MAX_FOUND` for a query); what each says cut of
    `redactor`'s values first (`_read`).

    Raises:
        InvalidInput: the query holds no words, or the skills dir cannot be read.
    """
    query = None if request.query is None else _query_words(request.query)
    names, unread = _names(skills_dir)
    read = (_read(skills_dir, request.session_id, name, redactor) for name in names)
    skills = [skill for skill in read if skill]
    if query is None:
        entries = [s.entry for s in skills]
        return SkillListing(skills=tuple(entries[:MAX_LISTED]), total=len(entries), unread=unread)
    ranked = sorted(
        ((_rank(s, query), s) for s in skills),
        key=lambda pair: (-pair[0][0], -pair[0][1], pair[1].entry.name),
    )
    matching = [s for (held, _), s in ranked if held]
    shown_entries = tuple(
        msgspec.structs.replace(s.entry, excerpt=_excerpt(s.body, query))
        for s in matching[:MAX_FOUND]
    )
    return SkillListing(skills=shown_entries, total=len(matching), unread=unread)
