"""The hooks service's settings: the bus, and the state directory its hooks file is in."""

from __future__ import annotations

from bastion.shared.settings import BusSettings

__all__ = ["HooksSettings"]


class HooksSettings(BusSettings, frozen=True, kw_only=True):
    """The bus, and `state_dir`, where `hooks.json` is read and `hooks.log` written."""

    state_dir: str
