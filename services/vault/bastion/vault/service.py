"""The vault service's setup: its endpoints, refusing until their issue lands."""

from __future__ import annotations

from bastion.proto import subjects
from bastion.proto.stubs import LeaseRequest
from bastion.shared.placeholder import placeholder_service

__all__ = ["setup"]

setup = placeholder_service(
    "vault",
    "Secrets encrypted at rest, leased to the sandbox service only.",
    issue=5,
    endpoints={"lease": (subjects.VAULT_LEASE, LeaseRequest)},
)
