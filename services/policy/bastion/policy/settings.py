"""The policy service's settings: where the operator's Cedar policies are."""

from __future__ import annotations

from pathlib import Path

import msgspec

from bastion.shared.settings import BusSettings
from bastion.shared.statedir import default_state_dir

__all__ = ["PolicySettings"]


def _default_state_dir() -> str:
    return str(default_state_dir())


class PolicySettings(BusSettings, frozen=True, kw_only=True):
    """Where the operator's Cedar policies are, and how often to look for changes.

    `policy_dir` (BASTION_POLICY_DIR) defaults to `<state dir>/policies`; a directory that
    does not exist means no operator policies.
    """

    state_dir: str = msgspec.field(default_factory=_default_state_dir)
    policy_dir: str = ""
    policy_poll_s: float = 1.0

    def policies_path(self) -> Path:
        """The policy directory these settings name."""
        chosen = self.policy_dir or str(Path(self.state_dir) / "policies")
        return Path(chosen).expanduser().resolve()
