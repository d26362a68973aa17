"""The mcp service's side towards upstream MCP servers: added, reviewed, pinned, called.

`gateway` answers the bus's `mcp.*` requests; `registry` keeps the servers in KV; `pins`
reviews their tools and says what may be offered, over the digests of `canonical`;
`signing` checks publishers' signatures; `pool` keeps each session's connections, made by
`upstream`; `values` fills a server's secrets and settings in; `rendering` turns what a
server answers into text; `invisible` finds text a person would not see.
"""
