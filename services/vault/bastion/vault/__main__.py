"""`python -m bastion.vault`: run one vault service instance."""

from __future__ import annotations

from bastion.shared.runner import run_service
from bastion.shared.settings import BusSettings
from bastion.vault.service import setup

if __name__ == "__main__":
    run_service("vault", BusSettings, setup)
