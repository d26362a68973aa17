"""`python -m bastion.orchestrator`: run one orchestrator instance."""

from __future__ import annotations

from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.shared.runner import run_service

if __name__ == "__main__":
    run_service("orchestrator", OrchestratorSettings, orchestrator_service)
