"""The documents stand on their own: every relative link in README.md, CONTRIBUTING.md and
docs/*.md resolves to a file inside the repository (and its `#anchor`, if it has one, to a
heading of that page), no file points at a design kept
outside it (a path into a sibling `shared` folder, or the old design document's name), and
none names a work item (the design is cited as `docs/architecture.md §N` instead)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")],
)

# `[text](target)` and `[text](target "title")`, and `[label]: target` definitions; code
# spans and fenced blocks are taken out first, as they show syntax, not links.
_INLINE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\".*\")?\s*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")

# Built from parts so that this file does not name what it looks for.
OUTSIDE_DESIGN = "DESIGN" + ".md"
OUTSIDE_FOLDER = "../" + "shared/"
WORK_ITEM = re.compile(r"\b[Ii]ssues? [0-9]+\b")


def links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside code."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return [*_INLINE.findall(prose), *_DEFINITION.findall(prose)]


def relative_links(text: str) -> list[str]:
    """The targets that are paths (no scheme such as https: or mailto:, not a bare anchor)."""
    return [t for t in links(text) if not _SCHEME.match(t) and not t.startswith("#")]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, blanks
    made hyphens (links keep their text, code spans and emphasis their content)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (outside fenced blocks); a heading whose
    anchor is taken gets `-1`, `-2`, ... as on GitHub."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in re.finditer(r"^#{1,6} +(.+?) *#* *$", _FENCE.sub("", text), re.MULTILINE):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def unanchored(document: Path) -> list[str]:
    """The links of `document` to a `#anchor` of a Markdown page (its own or another inside
    the repository) that no heading of that page has."""
    missing: list[str] = []
    for target in links(document.read_text(encoding="utf-8")):
        if _SCHEME.match(target) or "#" not in target:
            continue
        path_part, anchor = target.split("#", 1)
        page = (document.parent / path_part).resolve() if path_part else document
        if page.suffix != ".md" or not page.is_file():
            continue
        if anchor not in anchors(page.read_text(encoding="utf-8")):
            missing.append(target)
    return missing


def unresolved(document: Path) -> list[str]:
    """The relative links of `document` that name no file or folder inside the repository."""
    missing: list[str] = []
    for target in relative_links(document.read_text(encoding="utf-8")):
        path_part = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (document.parent / path_part).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            missing.append(target)
    return missing


def test_the_link_finder_sees_links_and_skips_code() -> None:
    text = (
        "See [the design](docs/architecture.md#3-one-call) and [site](https://example.org).\n"
        "[ref]: ../outside.md\n"
        "`[not](a-link.md)`\n"
        "```\n[nor](this.md)\n```\n"
        "[anchor](#top)\n"
    )
    assert relative_links(text) == ["docs/architecture.md#3-one-call", "../outside.md"]


def test_the_documents_exist() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in DOCUMENTS}
    assert {"README.md", "CONTRIBUTING.md", "docs/architecture.md"} <= names
    assert all(p.is_file() for p in DOCUMENTS)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves_inside_the_repository(document: Path) -> None:
    missing = unresolved(document)
    assert not missing, f"{document.relative_to(ROOT)} links to what is not in the repository: " + (
        ", ".join(missing)
    )


def test_anchors_are_githubs() -> None:
    text = (
        "# The sandbox's host user\n"
        "## MCP clients (Claude Code, Cursor, VS Code)\n"
        "## The `declared` network\n"
        "```sh\n# not a heading\n```\n"
        "### Decisions\n"
        "## Decisions\n"
    )
    assert anchors(text) == {
        "the-sandboxs-host-user",
        "mcp-clients-claude-code-cursor-vs-code",
        "the-declared-network",
        "decisions",
        "decisions-1",
    }


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_anchor_names_a_heading_of_its_page(document: Path) -> None:
    missing = unanchored(document)
    assert not missing, (
        f"{document.relative_to(ROOT)} links to sections that are not there (moved to another "
        "page, or renamed): " + ", ".join(missing)
    )


def _tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _lines_where(found: Callable[[str], bool]) -> list[str]:
    """`file:line: text` of every line of a repository file for which `found` holds."""
    files = _tracked_files()
    assert any(p.name == "README.md" for p in files)
    offenders: list[str] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if found(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return offenders


def test_no_file_points_outside_the_repository_for_its_design() -> None:
    offenders = _lines_where(lambda line: OUTSIDE_DESIGN in line or OUTSIDE_FOLDER in line)
    assert not offenders, (
        "cite docs/architecture.md (its numbered sections) instead of a design outside the "
        "repository:\n" + "\n".join(offenders)
    )


def test_the_work_item_finder_finds_one() -> None:
    # Built from parts so that this file does not name a work item itself.
    assert WORK_ITEM.search("Docker in issue" + " 3")
    assert not WORK_ITEM.search("no issues here; 3 tissues")


def test_no_file_names_a_work_item() -> None:
    offenders = _lines_where(lambda line: WORK_ITEM.search(line) is not None)
    assert not offenders, (
        "say what the code does, or cite docs/architecture.md §N, rather than the work item "
        "it came from:\n" + "\n".join(offenders)
    )
