"""A SKILL.md's front matter: the `key: value` lines between two `---` lines.

Only the simple form is read (no YAML library): `key: value`, a value in quotes, a list
as indented `- item` lines under an empty `key:`, and one level of nesting (`metadata:`
then indented `key: value` lines, read as `metadata.key`). `allowed-tools` may be written
space- or comma-separated (the Agent Skills convention); a space inside parentheses
belongs to its rule (`Bash(git log:*)` is one rule). `metadata.bastion-network` (hosts,
or `true`) and `metadata.bastion-secrets` (names) are space- or comma-separated too;
`metadata.bastion-timeout` is in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "NETWORK_KEY",
    "SECRETS_KEY",
    "TIMEOUT_KEY",
    "FrontMatter",
    "front_matter",
    "split_rules",
]

NETWORK_KEY = "metadata.bastion-network"
SECRETS_KEY = "metadata.bastion-secrets"
TIMEOUT_KEY = "metadata.bastion-timeout"
_NO_NETWORK = frozenset({"", "false", "no", "none"})


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


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


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


def _fields(lines: list[str]) -> dict[str, list[str]]:
    """Each key's value, or its list items; an indented key under an empty one is
    `parent.key`."""
    found: dict[str, list[str]] = {}
    parent = key = ""
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- "):
            if key:
                found[key].append(_unquoted(stripped[2:]))
            continue
        name, _, value = stripped.partition(":")
        if line[:1].isspace():
            if not parent:
                continue  # deeper nesting is not read
            key = f"{parent}.{name.strip()}"
        else:
            key = name.strip()
            parent = "" if value.strip() else key
        found[key] = [_unquoted(value)] if value.strip() else []
    return found


def _words(found: dict[str, list[str]], key: str) -> tuple[str, ...]:
    """A key's space- or comma-separated words, whether inline or listed."""
    words: list[str] = []
    for item in found.get(key, []):
        words.extend(w for w in item.replace(",", " ").split() if w)
    return tuple(words)


def _network(found: dict[str, list[str]]) -> tuple[str, ...]:
    """The declared hosts; `true` (any public host) stands alone, `false` means none."""
    words = _words(found, NETWORK_KEY)
    if len(words) == 1 and words[0].lower() in _NO_NETWORK:
        return ()
    if any(w.lower() in ("true", "yes") for w in words):
        return ("true",)
    return words


def front_matter(text: str) -> FrontMatter:
    """The front matter of `text`, empty when it has none."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return FrontMatter()
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        return FrontMatter()
    found = _fields(lines[1:end])
    rules: list[str] = []
    for item in found.get("allowed-tools", []):
        rules.extend(split_rules(item))
    return FrontMatter(
        name=" ".join(found.get("name", [])),
        description=" ".join(found.get("description", [])),
        allowed_tools=tuple(rules),
        network=_network(found),
        secrets=_words(found, SECRETS_KEY),
        timeout=" ".join(found.get(TIMEOUT_KEY, [])).strip(),
    )
