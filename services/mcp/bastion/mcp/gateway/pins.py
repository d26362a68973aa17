"""Reviewing an upstream server's tools: their digests, effects, pins, and what may be offered.

Pure logic, no I/O: the mcp service's endpoints list a server's tools and hand them here.

A tool's digest is the SHA-256 of its canonical JSON (`canonical` defines it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from mcp import types

from bastion.mcp.gateway.canonical import canonical_json, tool_digest
from bastion.mcp.gateway.invisible import suspicious_text, visible
from bastion.mcp.gateway.signing import SignatureCheck
from bastion.proto.mcp import (
    MAX_DESCRIPTION,
    MAX_SCHEMA_JSON,
    EffectOverride,
    OfferedTool,
    ReviewedTool,
    ReviewStatus,
    ToolPin,
    UpstreamKind,
)
from bastion.proto.policy import Effect

__all__ = [
    "MAX_OFFERED_NAME",
    "TOOL_NAME",
    "accepted_pins",
    "effect_of",
    "journaled",
    "offer",
    "pin_of",
    "review",
    "suspicious_text",
    "taints",
    "visible",
]

TOOL_NAME: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
"""An upstream tool name Bastion will offer (as `<server>_<tool>`)."""
MAX_OFFERED_NAME: Final = 128
"""The longest `<server>_<tool>` a model is given."""

# --- What a call does ---------------------------------------------------------------------


def _hint(tool: types.Tool, name: str) -> bool | None:
    value: bool | None = getattr(tool.annotations, name) if tool.annotations else None
    return value


def taints(tool: types.Tool) -> bool:
    """Its results come from an open world (the protocol's default when it does not say)."""
    return _hint(tool, "open_world_hint") is not False


def effect_of(tool: types.Tool, overrides: tuple[EffectOverride, ...]) -> Effect:
    """What a call of the tool is taken to do: the operator's `--effect` first, then its hints
    (said open world → external, even if read-only; read-only → read; open world by
    default → external; else write)."""
    for override in overrides:
        if override.tool == tool.name:
            return override.effect
    if _hint(tool, "open_world_hint") is True:
        return "external"
    if _hint(tool, "read_only_hint") is True:
        return "read"
    return "external" if taints(tool) else "write"


def journaled(tool: types.Tool, effect: Effect) -> bool:
    """Neither read-only nor idempotent: an identical call is answered from the journal."""
    return effect != "read" and _hint(tool, "idempotent_hint") is not True


# --- Review -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Look:
    """One live tool as a review sees it; `refusal` says why it can never be offered."""

    tool: types.Tool
    status: ReviewStatus
    effect: Effect
    description: str
    flags: tuple[str, ...]
    refusal: str = ""
    signature: str = ""
    """Why the signature is refused, when that is the refusal."""


def _refusal(tool: types.Tool, server: str, listed: int) -> str:
    if not TOOL_NAME.match(tool.name):
        return f"its name {tool.name[:80]!r} is not 1 to 64 letters, digits, '_', '.' or '-'"
    if server and len(f"{server}_{tool.name}") > MAX_OFFERED_NAME:
        return f"{server}_{tool.name} would be longer than {MAX_OFFERED_NAME} characters"
    if listed > 1:
        return f"the server lists {listed} tools named {tool.name}, so which one runs is unknown"
    for label, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
        size = len(canonical_json(schema).encode("utf-8", "surrogatepass")) if schema else 0
        if size > MAX_SCHEMA_JSON:
            return f"its {label} schema is {size} bytes of JSON, over the {MAX_SCHEMA_JSON} kept"
    return ""


def _description(tool: types.Tool) -> tuple[str, tuple[str, ...]]:
    """The description kept (cut to MAX_DESCRIPTION) and the flags about it and the title."""
    text = tool.description or ""
    flags = suspicious_text(tool.title or "", "the title")
    flags += suspicious_text(text, "the description")
    if len(text) > MAX_DESCRIPTION:
        flags += (f"the description is {len(text)} characters, cut to {MAX_DESCRIPTION}",)
        text = text[:MAX_DESCRIPTION]
    return text, flags


def _looks(
    live: list[types.Tool],
    pinned: tuple[ToolPin, ...],
    overrides: tuple[EffectOverride, ...],
    verifier: SignatureCheck | None,
    server: str,
) -> list[_Look]:
    pins = {pin.name: pin for pin in pinned}
    counts: dict[str, int] = {}
    for tool in live:
        counts[tool.name] = counts.get(tool.name, 0) + 1
    looks = []
    for tool in live:
        description, flags = _description(tool)
        effect = effect_of(tool, overrides)
        refusal = _refusal(tool, server, counts[tool.name])
        signature = verifier.check(tool) if verifier and not refusal else ""
        refusal = refusal or signature
        pin = pins.get(tool.name)
        status: ReviewStatus
        if refusal:
            status = "refused"
            flags = (*flags, refusal)
        elif pin is None:
            status = "new"
        else:
            status = "unchanged" if pin.digest == tool_digest(tool) else "changed"
        looks.append(_Look(tool, status, effect, description, flags, refusal, signature))
    return looks


def pin_of(tool: types.Tool, overrides: tuple[EffectOverride, ...]) -> ToolPin:
    """The pin a review keeps for a tool as it is now."""
    description, _ = _description(tool)
    return ToolPin(
        name=tool.name,
        digest=tool_digest(tool),
        description=description,
        effect=effect_of(tool, overrides),
        idempotent=_hint(tool, "idempotent_hint") is True,
        open_world=taints(tool),
    )


def review(
    live: list[types.Tool],
    pinned: tuple[ToolPin, ...],
    overrides: tuple[EffectOverride, ...],
    verifier: SignatureCheck | None,
    *,
    server: str = "",
) -> list[ReviewedTool]:
    """Each live tool (in the server's order) against its pin, then the pinned ones gone.

    A tool is refused, whatever its pin, when its name is unusable, it is listed twice, a
    schema is too large, or (with `verifier`) its signature is missing or does not verify.
    Descriptions are shown with their invisible characters as `<U+XXXX>`.
    """
    shown = [
        ReviewedTool(
            name=look.tool.name,
            effect=look.effect,
            description=visible(look.description),
            status=look.status,
            repeats_run_again=look.effect != "read" and not journaled(look.tool, look.effect),
            flags=look.flags,
        )
        for look in _looks(live, pinned, overrides, verifier, server)
    ]
    names = {tool.name for tool in live}
    shown += [
        ReviewedTool(
            name=pin.name,
            effect=pin.effect,
            description=visible(pin.description),
            status="removed",
            repeats_run_again=pin.effect != "read" and pin.idempotent,
        )
        for pin in pinned
        if pin.name not in names
    ]
    return shown


def accepted_pins(
    live: list[types.Tool],
    overrides: tuple[EffectOverride, ...],
    verifier: SignatureCheck | None,
    *,
    server: str = "",
) -> tuple[ToolPin, ...]:
    """The pins `add` or `review --accept` keeps: every live tool but the refused ones."""
    return tuple(
        pin_of(look.tool, overrides)
        for look in _looks(live, (), overrides, verifier, server)
        if look.status != "refused"
    )


# --- What a session is offered ------------------------------------------------------------

_RESOURCES_INPUT: Final = {"type": "object", "properties": {}, "additionalProperties": False}
_READ_RESOURCE_INPUT: Final = {
    "type": "object",
    "properties": {"uri": {"type": "string", "description": "The resource's URI, as listed."}},
    "required": ["uri"],
    "additionalProperties": False,
}


def _resources_tool(
    server: str, kind: UpstreamKind, description: str, schema: dict[str, object]
) -> OfferedTool:
    return OfferedTool(
        name=f"{server}_{kind}",
        server=server,
        upstream="",
        upstream_kind=kind,
        description=description,
        effect="read",
        input_schema_json=canonical_json(schema),
        taints=True,
    )


def _resources_tools(server: str) -> list[OfferedTool]:
    listing = f"List the resources MCP server {server} offers: their URIs and names."
    reading = f"Read a resource of MCP server {server} by its URI."
    return [
        _resources_tool(server, "resources", listing, _RESOURCES_INPUT),
        _resources_tool(server, "read_resource", reading, _READ_RESOURCE_INPUT),
    ]


def _withheld(look: _Look, server: str) -> str:
    name, again = look.tool.name, f"(`bastion mcp review {server}`)"
    if look.status == "new":
        why = f"is new and was not reviewed, so it is not offered {again}"
    elif look.status == "changed":
        why = f"changed since it was reviewed, so it is not offered {again}"
    elif look.signature:
        why = (
            f"is signed badly ({look.signature}), so it is not offered (its publisher must"
            f" sign it with the key pinned when {server} was added)"
        )
    else:
        why = f"cannot be offered: {look.refusal}"
    return f"MCP server {server}: {name} {why}"


def offer(
    live: list[types.Tool],
    pinned: tuple[ToolPin, ...],
    overrides: tuple[EffectOverride, ...],
    verifier: SignatureCheck | None,
    server_name: str,
    *,
    with_resources: bool = False,
) -> tuple[list[OfferedTool], list[str]]:
    """The tools a session may be given now — those whose live definition matches its pin,
    as `<server>_<tool>`, with the effect they were reviewed as — and notices naming the
    others. A tool taints the session when it is open-world or taken to be `external`.
    `with_resources` adds `<server>_resources` and `<server>_read_resource`."""
    pins = {pin.name: pin for pin in pinned}
    tools = _resources_tools(server_name) if with_resources else []
    taken = {tool.name for tool in tools}
    notices = []
    for look in _looks(live, pinned, overrides, verifier, server_name):
        name = f"{server_name}_{look.tool.name}"
        if look.status != "unchanged":
            notices.append(_withheld(look, server_name))
            continue
        if name in taken:
            notices.append(
                f"MCP server {server_name}: {look.tool.name} is not offered, as {name} is"
                " Bastion's name for one of the server's resources tools"
            )
            continue
        effect = pins[look.tool.name].effect
        tools.append(
            OfferedTool(
                name=name,
                server=server_name,
                upstream=look.tool.name,
                description=visible(look.description),
                effect=effect,
                input_schema_json=canonical_json(look.tool.input_schema),
                digest=tool_digest(look.tool),
                journaled=journaled(look.tool, effect),
                taints=taints(look.tool) or effect == "external",
            )
        )
    names = {tool.name for tool in live}
    notices += [
        f"MCP server {server_name}: {pin.name} was reviewed but the server no longer lists it"
        f" (`bastion mcp review {server_name}`)"
        for pin in pinned
        if pin.name not in names
    ]
    return tools, notices
