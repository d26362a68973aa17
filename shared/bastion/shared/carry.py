"""Carry fields across by name: what a message keeps of another (a record of its ask, a view)."""

from typing import Any, TypeVar

import msgspec

__all__ = ["carried", "viewed"]

S = TypeVar("S", bound=msgspec.Struct)


def carried(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    """`source`'s attributes `names`, by name: keyword arguments for the message that keeps them."""
    return {name: getattr(source, name) for name in names}


def viewed(source: object, kind: type[S]) -> S:
    """A `kind` made of `source`'s attributes of the same names as its fields: a view of a
    record that shows part of it."""
    return kind(**carried(source, kind.__struct_fields__))
