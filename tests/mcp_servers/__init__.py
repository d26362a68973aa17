"""Small MCP servers that misbehave, for the upstream connection's tests."""
