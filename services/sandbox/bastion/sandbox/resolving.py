"""The workspace paths a file call touches, resolved through links as the file tools walk.

The policy matches path rules (`Write(notes/*)`, a Cedar condition on `secrets/*`) against
these, not against the path the agent wrote: `notes/up/key` with `notes/up -> ../secrets`
is `secrets/key`. Each path is walked by `files._locate`, the walk every file tool makes
(one component at a time from a descriptor of the workspace, links followed only while
they stay inside); the parts that do not exist yet (a file or directories to be made)
are not links, and are added as written.

`resolve_paths_now` does the same on the event loop when it cannot wait: the paths alone
(a patch's parse is work of its size), in at most `NOW_STEPS` steps of walking for them all
(directory lookups and link reads, no file opened).
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from bastion.proto.sandbox import ResolvePaths
from bastion.sandbox.files import Budget, WouldBlock, _locate, _parts
from bastion.sandbox.patchparse import parse_patch
from bastion.shared.errors import InvalidInput, NotFound

__all__ = ["resolve_paths", "resolve_paths_now"]


def _resolved(workspace: Path, root: str, path: str, budget: Budget | None) -> str:
    """`path` relative to the workspace after its links (`.` for the root itself)."""
    parts = _parts(path)
    if not parts:
        return "."
    try:
        parent, name = _locate(workspace, path, make_dirs=False, directory=True, budget=budget)
    except NotFound:
        if parts[-1] == "..":
            raise InvalidInput(
                f"{path!r} climbs with `..` out of a directory that does not exist: give the "
                "path without `..`"
            ) from None
        return posixpath.normpath(
            posixpath.join(_resolved(workspace, root, "/".join(parts[:-1]), budget), parts[-1])
        )
    try:
        where = os.path.relpath(os.readlink(f"/proc/self/fd/{parent}"), root)
    finally:
        os.close(parent)
    return posixpath.normpath(posixpath.join(where, name))


def _all_resolved(
    workspace: Path, paths: list[str], budget: Budget | None = None
) -> tuple[str, ...]:
    root = os.path.realpath(workspace)
    return tuple(dict.fromkeys(_resolved(workspace, root, path, budget) for path in paths))


def resolve_paths(workspace: Path, request: ResolvePaths) -> tuple[str, ...]:
    """Each path of `request`, and each of its patch, resolved in `workspace`, once each."""
    paths = list(request.paths)
    if request.patch:
        for change in parse_patch(request.patch):
            paths += [change.path, *([change.move_to] if change.move_to else [])]
    return _all_resolved(workspace, paths)


def resolve_paths_now(workspace: Path, request: ResolvePaths) -> tuple[str, ...] | None:
    """`resolve_paths`' answer, its errors too, when it cannot wait: a request without a
    patch whose paths resolve in `NOW_STEPS` steps; None otherwise (`resolve_paths` is to
    run in a worker thread then)."""
    if request.patch:
        return None
    try:
        return _all_resolved(workspace, list(request.paths), Budget())
    except WouldBlock:
        return None
