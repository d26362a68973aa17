"""`python -m bastion.mcp`: run one mcp service instance."""

from __future__ import annotations

from bastion.mcp.service import McpSettings, setup
from bastion.shared.runner import run_service

if __name__ == "__main__":
    run_service("mcp", McpSettings, setup)
