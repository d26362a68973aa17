"""A SKILL.md's front matter: the YAML document between its first two `---` lines.

It is read with PyYAML's safe loader, at most `MAX_FRONT_MATTER` characters, anchors and
aliases refused, a key given twice refused, and every field type-checked, so that a
skill's permissions never come from a misread: a wrong shape is an `InvalidSkillFile`
naming the skill and the line. `allowed-tools` is a string, space- or comma-separated (the
Agent Skills convention; a space inside parentheses belongs to its rule, so
`Bash(git log:*)` is one rule), or a list of them. Under `metadata:`, `bastion-network`
(hosts, or `true`) and `bastion-secrets` (names) are the same; an internationalized host
is kept in its IDNA 2008 `xn--` form. `bastion-timeout` is in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from bastion.shared.errors import InvalidInput
from bastion.shared.hostnames import InvalidHostName, ascii_host

__all__ = [
    "MAX_FRONT_MATTER",
    "NETWORK_KEY",
    "SECRETS_KEY",
    "TIMEOUT_KEY",
    "FrontMatter",
    "InvalidSkillFile",
    "body_of",
    "front_matter",
    "split_rules",
]

NETWORK_KEY = "metadata.bastion-network"
SECRETS_KEY = "metadata.bastion-secrets"
TIMEOUT_KEY = "metadata.bastion-timeout"
MAX_FRONT_MATTER: Final = 16 * 1024
"""Characters of front matter read; a longer one is refused, not cut."""
_NO_NETWORK = frozenset({"", "false", "no", "none"})


class InvalidSkillFile(InvalidInput):
    """A SKILL.md whose front matter cannot be read as declared; the sentence names the
    skill, the line and what to write."""


@dataclass(frozen=True)
class FrontMatter:
    """What a skill declares about itself."""

    name: str = ""
    description: str = ""
    allowed_tools: tuple[str, ...] = field(default_factory=tuple)
    network: tuple[str, ...] = field(default_factory=tuple)
    """Hosts its scripts may reach (`host`, `*.suffix`, `host:port`), or `("true",)`."""
    secrets: tuple[str, ...] = field(default_factory=tuple)
    timeout: str = ""
    """`metadata.bastion-timeout` as written: the reader checks it is a number of seconds."""


def split_rules(text: str) -> tuple[str, ...]:
    """`Write(notes/*) Bash(git log:*), Read` as its rules, a space in parentheses kept."""
    rules: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        if depth == 0 and (char.isspace() or char == ","):
            if current:
                rules.append("".join(current))
                current = []
            continue
        current.append(char)
    if current:
        rules.append("".join(current))
    return tuple(rules)


class _Refusal(Exception):
    """Why the loader stopped, and at which line of the front matter (0-based)."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing anchors, aliases and a key given twice."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _Refusal(event.start_mark.line, "it uses a YAML anchor or alias (& or *)")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _Refusal(key_node.start_mark.line, f"it gives the key {key!r} twice")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class _Fields:
    """The document's mapping and how to refuse one of its fields, for one skill."""

    skill: str
    document: dict[Any, Any]
    lines: dict[str, int]

    def refuse(self, key: str, problem: str) -> InvalidSkillFile:
        line = self.lines.get(key, 0)
        return InvalidSkillFile(
            f"skill {self.skill!r}: SKILL.md line {line + 2} ({key}) {problem}: fix its front "
            "matter (YAML: a string, or a list of strings where a list is meant)"
        )

    def value(self, key: str) -> object:
        if not key.startswith("metadata."):
            return self.document.get(key)
        metadata = self.document.get("metadata")
        if metadata is None:
            return None
        if not isinstance(metadata, dict):
            raise self.refuse("metadata", "is not a mapping of keys to values")
        return metadata.get(key.removeprefix("metadata."))

    def text(self, key: str) -> str:
        value = self.value(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.refuse(key, f"is a {type(value).__name__}, not a string")
        return value

    def strings(self, key: str) -> list[str]:
        """A string value as a list of one, or a list of strings as it is."""
        value = self.value(key)
        items = value if isinstance(value, list) else [] if value is None else [value]
        strings = [item for item in items if isinstance(item, str)]
        if len(strings) != len(items):
            raise self.refuse(key, "is not a string or a list of strings")
        return strings

    def words(self, key: str) -> tuple[str, ...]:
        """A string's space- or comma-separated words, or those of a list of strings."""
        return tuple(w for item in self.strings(key) for w in item.replace(",", " ").split())


def _lines(node: yaml.Node | None) -> dict[str, int]:
    """The line of each top-level and `metadata.` key, for the sentences."""
    lines: dict[str, int] = {}
    if not isinstance(node, yaml.MappingNode):
        return lines
    for key, value in node.value:
        name = str(key.value)
        lines[name] = key.start_mark.line
        if name == "metadata" and isinstance(value, yaml.MappingNode):
            for inner, _ in value.value:
                lines[f"metadata.{inner.value}"] = inner.start_mark.line
    return lines


def _document(skill: str, source: str) -> _Fields:
    if len(source) > MAX_FRONT_MATTER:
        raise InvalidSkillFile(
            f"skill {skill!r}: the front matter of its SKILL.md is longer than "
            f"{MAX_FRONT_MATTER} characters: keep it to the declarations, the rest in the body"
        )
    loader = _Loader(source)
    try:
        node = loader.get_single_node()
        document = None if node is None else loader.construct_document(node)
    except _Refusal as refusal:
        raise InvalidSkillFile(
            f"skill {skill!r}: SKILL.md line {refusal.line + 2}: {refusal.problem}: write "
            "the value itself"
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 2}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "it is not YAML"
        raise InvalidSkillFile(
            f"skill {skill!r}: the front matter of its SKILL.md is not valid YAML at{line} "
            f"({problem}): quote a value that holds `: ` or starts with a symbol"
        ) from None
    finally:
        loader.dispose()
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise InvalidSkillFile(
            f"skill {skill!r}: the front matter of its SKILL.md is not a mapping of keys to "
            "values: write `key: value` lines"
        )
    return _Fields(skill, document, _lines(node))


def _network(fields: _Fields) -> tuple[str, ...]:
    """The declared hosts; `true` (any public host) stands alone, `false` means none."""
    value = fields.value(NETWORK_KEY)
    if isinstance(value, bool):
        return ("true",) if value else ()
    words = fields.words(NETWORK_KEY)
    if len(words) == 1 and words[0].lower() in _NO_NETWORK:
        return ()
    if any(w.lower() in ("true", "yes") for w in words):
        return ("true",)
    try:
        return tuple(_ascii_declared(w) for w in words)
    except InvalidHostName as error:
        raise fields.refuse(NETWORK_KEY, f"names a host IDNA 2008 refuses ({error})") from None


def _ascii_declared(word: str) -> str:
    """`*.faß.de:8443` as `*.xn--fa-hia.de:8443`; an ASCII declaration as written."""
    if word.isascii():
        return word
    wildcard = "*." if word.startswith("*.") else ""
    host, sep, port = word.removeprefix(wildcard).rpartition(":")
    if not (sep and port.isdigit()):
        host, sep, port = word.removeprefix(wildcard), "", ""
    return wildcard + ascii_host(host) + sep + port


def _timeout(fields: _Fields) -> str:
    value = fields.value(TIMEOUT_KEY)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return fields.text(TIMEOUT_KEY).strip()


def _end(lines: list[str]) -> int | None:
    """The index of the line closing the front matter, None when there is none."""
    if not lines or lines[0].rstrip() != "---":
        return None
    return next((i for i, line in enumerate(lines[1:], 1) if line.rstrip() == "---"), None)


def body_of(text: str) -> str:
    """What follows the front matter of `text` (all of it when it has none)."""
    lines = text.splitlines()
    end = _end(lines)
    return text if end is None else "\n".join(lines[end + 1 :])


def front_matter(text: str, skill: str = "SKILL.md") -> FrontMatter:
    """The front matter of `text` (the SKILL.md of `skill`), empty when it has none.

    Raises:
        InvalidSkillFile: it is too long, not YAML, uses an anchor or alias, gives a key
            twice, or a field has the wrong type; the sentence names the skill and line.
    """
    lines = text.splitlines()
    end = _end(lines)
    if end is None:
        return FrontMatter()
    fields = _document(skill, "\n".join(lines[1:end]))
    return FrontMatter(
        name=fields.text("name").strip(),
        description=fields.text("description").strip(),
        allowed_tools=tuple(r for w in fields.strings("allowed-tools") for r in split_rules(w)),
        network=_network(fields),
        secrets=fields.words(SECRETS_KEY),
        timeout=_timeout(fields),
    )
