"""`python -m bastion.policy`: run one policy service instance."""

from __future__ import annotations

from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.shared.runner import run_service

if __name__ == "__main__":
    run_service("policy", PolicySettings, policy_service)
