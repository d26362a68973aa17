"""`python -m bastion.sandbox`: run one sandbox service instance."""

from __future__ import annotations

from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.runner import run_service

if __name__ == "__main__":
    run_service("sandbox", SandboxSettings, sandbox_service)
