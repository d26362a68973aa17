"""The canonical JSON of a tool: what its pin digest and its signature cover.

The canonical form of a tool is the JSON object of exactly these members of the tool as it
is on the wire, each left out when the tool has none (or null): `name`, `title`,
`description`, `inputSchema`, `outputSchema`, `annotations` (`ToolAnnotations` with its
camelCase wire keys — `title`, `readOnlyHint`, `destructiveHint`, `idempotentHint`,
`openWorldHint` — those that are null left out). Nothing of `_meta` is in it, so the
signature kept there (`io.bastion/signature`) is not either; the `x-mcp-header` marks of
the 2026-07-28 revision live in the input schema's properties, and are covered with it.
`icons` and `execution` are not covered.

It is written with keys sorted at every depth, no whitespace, non-ASCII characters as
themselves (no `\\u` escapes) in UTF-8, integers as integers and floats as Python's `json`
writes them (`1.0`, `1e+20`), a NaN or infinity as `null`; a lone surrogate is written as
its three bytes (UTF-8 with `surrogatepass`). Array order is kept. The digest is the
SHA-256 of those bytes, in hex. `docs/signed-tools.md` says the same for publishers.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

import mcp.types

__all__ = ["canonical_json", "canonical_tool_json", "tool_digest"]

_CANONICAL_FIELDS: Final = frozenset(
    {"name", "title", "description", "input_schema", "output_schema", "annotations"}
)


def canonical_json(value: Any) -> str:
    """`value` as JSON with keys sorted, no whitespace and non-ASCII characters as themselves."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_tool_json(tool: mcp.types.Tool) -> bytes:
    """The canonical JSON of a tool's definition, as the module docstring defines it."""
    wire = tool.model_dump(
        by_alias=True, mode="json", exclude_none=True, include=set(_CANONICAL_FIELDS)
    )
    return canonical_json(wire).encode("utf-8", "surrogatepass")


def tool_digest(tool: mcp.types.Tool) -> str:
    """SHA-256 (hex) of the tool's canonical JSON: what its pin holds."""
    return hashlib.sha256(canonical_tool_json(tool)).hexdigest()
