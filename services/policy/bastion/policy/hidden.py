"""Which paths a listing or search may not show: those an operator policy keeps from a read.

A search that shows a file's lines reads it, and a listing that names a file tells it is
there, so each path such a call would show is judged as a `read_file` of it by the same
session (its level, taint and skill as the call's). Any word of an operator policy — a
refusal, or a question a person must answer — keeps the path out: nothing is read unasked.
"""

from __future__ import annotations

import msgspec

from bastion.policy.narrowing import Narrowing
from bastion.proto.policy import PathsCheck, PathsChecked

__all__ = ["hidden_paths"]


def hidden_paths(check: PathsCheck, operator: Narrowing) -> PathsChecked:
    """The paths of `check` an operator policy refuses or asks about as a read."""
    hidden = tuple(
        path
        for path in check.paths
        if operator.narrow(
            msgspec.structs.replace(
                check.call, tool="read_file", effect="read", target=path, paths=()
            )
        )
        is not None
    )
    return PathsChecked(hidden=hidden)
