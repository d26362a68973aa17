"""The egress service's errors: a refused connection, and a grant that is not good.

BastionError
├── Refused        code: denied       (the deny list, an undeclared host, a Host header)
├── GrantRefused   code: denied       (unknown, expired or forged credentials: 407)
└── Unreachable    code: unavailable  (the name does not resolve, the host does not answer)
"""

from __future__ import annotations

from bastion.proto import errors as codes
from bastion.shared.errors import BastionError

__all__ = ["GrantRefused", "Refused", "Unreachable"]


class Refused(BastionError):
    """A connection the rules refuse, before anything is sent; `reason` is the short phrase."""

    code = codes.DENIED

    def __init__(self, target: str, reason: str) -> None:
        # An address refused for its kind (loopback, private, …) is the operator's to allow.
        allow = (
            " (an operator lets a range through with BASTION_EGRESS_ALLOW_RANGES, e.g. 127.0.0.0/8)"
            if " address " in f" {reason}"
            else ""
        )
        super().__init__(f"{target} refused: {reason}{allow}")
        self.target = target
        self.reason = reason


class GrantRefused(BastionError):
    code = codes.DENIED


class Unreachable(BastionError):
    code = codes.UNAVAILABLE
