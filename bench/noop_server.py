"""An MCP server with one tool that does nothing: the upstream of `bench.bench_mcp`."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("noop")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def noop() -> str:
    """Do nothing and say so."""
    return "ok"


if __name__ == "__main__":
    server.run()
