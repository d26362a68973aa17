"""`python -m bastion.egress`: run one egress service instance."""

from __future__ import annotations

from bastion.egress.service import setup
from bastion.shared.runner import run_service
from bastion.shared.settings import BusSettings

if __name__ == "__main__":
    run_service("egress", BusSettings, setup)
