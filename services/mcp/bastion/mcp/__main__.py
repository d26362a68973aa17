"""`python -m bastion.mcp`: run one mcp service instance."""

from __future__ import annotations

from bastion.mcp.service import setup
from bastion.shared.runner import run_service
from bastion.shared.settings import BusSettings

if __name__ == "__main__":
    run_service("mcp", BusSettings, setup)
