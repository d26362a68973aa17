"""The mcp service: upstream MCP servers, reviewed, pinned and sandboxed (`gateway`, with
its `upstream` connections), and the front door for outside agents — the HTTP API and MCP
at `/mcp` (`frontdoor`).
"""
