"""`python -m bastion.mcp`: run one mcp service instance."""

from __future__ import annotations

from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.shared.runner import run_service

if __name__ == "__main__":
    run_service("mcp", McpSettings, mcp_service)
