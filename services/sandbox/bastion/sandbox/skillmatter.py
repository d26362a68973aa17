"""A SKILL.md's front matter: the `key: value` lines between two `---` lines.

Only the simple form is read (no YAML library): `key: value`, a value in quotes, and a
list as indented `- item` lines under an empty `key:`. `allowed-tools` may be written
space- or comma-separated (the Agent Skills convention); a space inside parentheses
belongs to its rule (`Bash(git log:*)` is one rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FrontMatter", "front_matter", "split_rules"]


@dataclass(frozen=True)
class FrontMatter:
    """What a skill declares about itself."""

    name: str = ""
    description: str = ""
    allowed_tools: tuple[str, ...] = field(default_factory=tuple)


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
    """Each top-level key's value, or its list items."""
    found: dict[str, list[str]] = {}
    key = ""
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if line[:1].isspace() or stripped.startswith("- "):
            if key and stripped.startswith("- "):
                found[key].append(_unquoted(stripped[2:]))
            continue  # nested mappings (metadata: …) are not read here
        key, _, value = stripped.partition(":")
        key = key.strip()
        found[key] = [_unquoted(value)] if value.strip() else []
    return found


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
    )
