"""What an upstream server answered, as the text a model (or an operator) is shown.

Text is passed on; anything else is described, never inlined (an image's bytes, a blob).
What reaches the session is text of bounded size, cut of the tenant's values before it is
shortened (`bounded`): a value across the bound is never shown in part.
"""

from __future__ import annotations

import json

from mcp import types

from bastion.shared.linecuts import shown_start
from bastion.shared.redaction import Redactor

__all__ = [
    "MAX_RESULT_CHARS",
    "bounded",
    "prompts_text",
    "read_text",
    "resources_text",
    "result_text",
]

MAX_RESULT_CHARS = 256 * 1024
"""The most of an answer passed on: a bus message is at most 1 MiB."""


def bounded(text: str, redactor: Redactor | None) -> str:
    """`text` with `redactor`'s values cut out, then at most `MAX_RESULT_CHARS` of it (the
    cut start of a longer one: what could begin a value running past it is not shown)."""
    if len(text) <= MAX_RESULT_CHARS:
        return redactor.redact(text) if redactor else text
    room = redactor.longest if redactor else 0
    shown = shown_start(redactor, text[: MAX_RESULT_CHARS + room], MAX_RESULT_CHARS)
    return f"{shown}\n[the rest of the answer was left out: {len(text)} characters in all]"


def _resource_contents(contents: types.TextResourceContents | types.BlobResourceContents) -> str:
    if isinstance(contents, types.TextResourceContents):
        return contents.text
    kind = contents.mime_type or "binary data"
    return f"[{contents.uri}: {kind}, {len(contents.blob) * 3 // 4} bytes, not shown]"


def _block(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        what = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{what} {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]"
    if isinstance(block, types.EmbeddedResource):
        return _resource_contents(block.resource)
    if isinstance(block, types.ResourceLink):
        return f"[resource {block.uri}" + (f": {block.description}]" if block.description else "]")
    return f"[{type(block).__name__}, not shown]"


def result_text(result: types.CallToolResult) -> str:
    """A tool's answer: its content blocks in order; its structured content when it has
    no text of its own."""
    parts = [_block(block) for block in result.content]
    has_text = any(isinstance(b, types.TextContent) for b in result.content)
    if not has_text and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True))
    text = "\n".join(parts)
    return text if text.strip() else "(no output)"


def resources_text(
    resources: list[types.Resource], templates: list[types.ResourceTemplate], server: str
) -> str:
    """What a server offers: one line per resource, then its templates."""
    lines = []
    for resource in resources:
        about = f" — {resource.description}" if resource.description else ""
        kind = f" ({resource.mime_type})" if resource.mime_type else ""
        lines.append(f"{resource.uri} {resource.name}{kind}{about}")
    for template in templates:
        about = f" — {template.description}" if template.description else ""
        lines.append(f"{template.uri_template} (template) {template.name}{about}")
    if not lines:
        return f"MCP server {server} offers no resources"
    return "\n".join(lines)


def read_text(result: types.ReadResourceResult) -> str:
    """A resource's contents, each part in turn."""
    return "\n".join(_resource_contents(c) for c in result.contents) or "(empty)"


def prompts_text(prompts: list[types.Prompt], server: str) -> str:
    """A server's prompts, each with the arguments it takes."""
    lines = []
    for prompt in prompts:
        arguments = ", ".join(
            a.name + ("" if a.required else "?") for a in (prompt.arguments or [])
        )
        about = f": {prompt.description}" if prompt.description else ""
        lines.append(f"{prompt.name}({arguments}){about}")
    if not lines:
        return f"MCP server {server} offers no prompts"
    return "\n".join(lines)
