"""`python -m bastion.egress`: run one egress service instance."""

from __future__ import annotations

from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.shared.runner import run_service

if __name__ == "__main__":
    run_service("egress", EgressSettings, egress_service())
