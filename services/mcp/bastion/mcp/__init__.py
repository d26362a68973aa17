"""The mcp service. Upstream MCP servers, reviewed and pinned, and the MCP front door.

Until issue 6 lands it registers on the bus and answers its endpoints with a typed
`not_implemented` error.
"""
