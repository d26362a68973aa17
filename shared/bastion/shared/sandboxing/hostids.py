"""Which host user a bubblewrap sandbox runs as: never host root.

bubblewrap maps the sandbox's uid 10001 to the host user that starts it. Started by a
root service that is host root: what a command creates would belong to root, a setuid
binary it leaves would give whoever runs it euid 0, and a root-only file a bind shows
would be readable. So a root service drops to an unprivileged host user right before
bwrap (`setpriv`, after the cgroup join and `prlimit`): the operator's
`BASTION_SANDBOX_HOST_UID`/`_GID` when set, else the owner of the directory the sandbox
works in. Either being root (uid or gid 0) is refused. A service that is not root runs
bwrap as itself (`None` here): it is unprivileged already.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bastion.shared.errors import InvalidInput
from bastion.shared.sandboxing.errors import SandboxFailed

__all__ = [
    "HostIds",
    "configured_ids",
    "drop_argv",
    "path_owner",
    "sandbox_ids",
    "unreachable_parent",
]


@dataclass(frozen=True)
class HostIds:
    """A host uid and gid: the sandbox's user on the host, and the owner of what it makes."""

    uid: int
    gid: int


def configured_ids(uid: int | None, gid: int | None) -> HostIds | None:
    """The operator's host user for sandboxes (its gid the uid when not given), or None.

    Raises:
        InvalidInput: a gid without a uid.
    """
    if uid is None:
        if gid is not None:
            raise InvalidInput(
                "BASTION_SANDBOX_HOST_GID is set without BASTION_SANDBOX_HOST_UID: set both, "
                "or neither to run each sandbox as its workspace's owner"
            )
        return None
    return HostIds(uid, uid if gid is None else gid)


def path_owner(path: Path) -> HostIds:
    """Who owns `path` on the host."""
    info = os.stat(path)
    return HostIds(info.st_uid, info.st_gid)


def sandbox_ids(
    directory: Path, configured: HostIds | None, what: str, *, settable: bool = True
) -> HostIds | None:
    """The host user a sandbox working in `directory` runs as; None for the service's own.

    `what` names the directory in the sentence ("the workspace /srv/ws"); `settable` says
    whether the operator's variables can choose another user (the sandbox service's can).

    Raises:
        SandboxFailed: the service is root and that user would be root.
    """
    if os.geteuid() != 0:
        return None
    ids = configured if configured is not None else path_owner(directory)
    if ids.uid == 0 or ids.gid == 0:
        source = (
            "BASTION_SANDBOX_HOST_UID/_GID name root"
            if configured is not None
            else f"{what} belongs to root (uid {ids.uid}, gid {ids.gid})"
        )
        setting = (
            ", or set BASTION_SANDBOX_HOST_UID and BASTION_SANDBOX_HOST_GID to one"
            if settable
            else ""
        )
        raise SandboxFailed(
            f"{source}, and Bastion never runs a sandbox as host root (uid or gid 0): give "
            f"the directory to an unprivileged user (`chown -R 1000:1000 {directory}`)"
            f"{setting}"
        )
    return ids


def drop_argv(setpriv: str, ids: HostIds | None) -> list[str]:
    """`setpriv` becoming `ids` (no supplementary groups) before the rest of the argv runs.

    Raises:
        SandboxFailed: the service is root and no unprivileged user was chosen.
    """
    if ids is None:
        if os.geteuid() == 0:
            raise SandboxFailed(
                "the service runs as root and no unprivileged host user was chosen for the "
                "sandbox: Bastion never runs a sandbox as host root"
            )
        return []
    return [setpriv, f"--reuid={ids.uid}", f"--regid={ids.gid}", "--clear-groups", "--"]


def unreachable_parent(path: Path, ids: HostIds) -> Path | None:
    """The first directory above `path` (from `/` down) that `ids` may not pass through
    (no search permission by owner, group or others), or None when it reaches `path`.
    bubblewrap, run as that user, resolves every directory it binds the same way."""
    for directory in reversed(path.parents):
        info = directory.stat()
        if info.st_uid == ids.uid:
            bit = 0o100
        elif info.st_gid == ids.gid:
            bit = 0o010
        else:
            bit = 0o001
        if not info.st_mode & bit:
            return directory
    return None
