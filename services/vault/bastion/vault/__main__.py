"""`python -m bastion.vault`: run one vault service instance."""

from __future__ import annotations

from bastion.shared.runner import run_service
from bastion.vault.service import vault_service
from bastion.vault.settings import VaultSettings

if __name__ == "__main__":
    run_service("vault", VaultSettings, vault_service)
