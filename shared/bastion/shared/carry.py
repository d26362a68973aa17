"""Carry fields across by name: what one message keeps of another (a record of its ask)."""

from typing import Any

__all__ = ["carried"]


def carried(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    """`source`'s attributes `names`, by name: keyword arguments for the message that keeps them."""
    return {name: getattr(source, name) for name in names}
