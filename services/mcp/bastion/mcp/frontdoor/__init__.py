"""The MCP front door: Bastion as an MCP server (Streamable HTTP at `/mcp`) for outside agents.

`tokens` keeps agents' bearer tokens, `guard` checks every request's Host, Origin and token,
`records` keeps MCP sessions in KV, `manager` serves both protocol eras and adopts sessions
another replica began, `binding` ties an MCP session to a Bastion session, `tools`,
`asking`, `relay` and `resources` answer the MCP methods, `server` puts them together.
"""
