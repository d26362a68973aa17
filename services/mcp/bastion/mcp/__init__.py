"""The mcp service: upstream MCP servers, reviewed, pinned and sandboxed (`gateway`,
`upstream`, `pins`, `signing`), and the front door for outside agents — the HTTP API and
MCP at `/mcp` (`httpapp`, `frontdoor`).
"""
