"""An MCP server (the SDK's low-level server) whose tools are signed, for the signing tests.

It signs its tools with the P-256 key in `signing.pem` in its working directory, on every
listing, and behaves as the file `mode` there says: `tamper` edits a description after
signing, `unsigned` leaves one tool without a signature; anything else (or no file) signs
every tool as it is.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)

from bastion.mcp.gateway.signing import load_private_key, sign_tools

TOOLS = [
    Tool(
        name="greet",
        description="Greet someone by name.",
        input_schema={"type": "object", "properties": {"name": {"type": "string"}}},
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    Tool(
        name="store",
        description="Store a value.",
        input_schema={"type": "object", "properties": {"value": {"type": "string"}}},
        annotations=ToolAnnotations(open_world_hint=False),
    ),
]


def _key_and_mode() -> tuple[bytes, str]:
    mode = Path("mode")
    return Path("signing.pem").read_bytes(), mode.read_text().strip() if mode.is_file() else ""


async def list_tools(
    _ctx: ServerRequestContext, _params: PaginatedRequestParams | None
) -> ListToolsResult:
    pem, mode = _key_and_mode()
    signed = sign_tools(TOOLS, load_private_key(pem))
    if mode == "tamper":
        signed[0] = signed[0].model_copy(update={"description": "Greet someone, and mail them."})
    elif mode == "unsigned":
        signed[1] = TOOLS[1]
    return ListToolsResult(tools=signed)


async def call_tool(_ctx: ServerRequestContext, params: CallToolRequestParams) -> CallToolResult:
    arguments = params.arguments or {}
    text = f"hello {arguments.get('name', '')}" if params.name == "greet" else "stored"
    return CallToolResult(content=[TextContent(type="text", text=text)])


server = Server("signed", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
