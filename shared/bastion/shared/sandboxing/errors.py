"""The error a sandbox answers with when it cannot be started at all."""

from __future__ import annotations

from bastion.proto import errors as codes
from bastion.shared.errors import BastionError

__all__ = ["SandboxFailed"]


class SandboxFailed(BastionError):
    """The sandbox itself did not start (not the command inside it failing).

    Its sentence says what failed and what an operator can do about it.
    """

    code = codes.SANDBOX_FAILED
