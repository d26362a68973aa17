"""Work the sandbox service does: commands, file tools, and the check before a session."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bastion.proto._base import Message, PathText, SessionId, Text

__all__ = [
    "ExecRequest",
    "ExecResult",
    "FileRequest",
    "FileResult",
    "Limits",
    "ReadFile",
    "SandboxCheck",
    "SandboxReady",
    "SandboxRelease",
    "SandboxReleased",
    "WriteFile",
]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


class Limits(Message, frozen=True, kw_only=True):
    """What one command may use; the defaults are the reference's."""

    wall_s: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 120.0
    cpu_s: Annotated[int, msgspec.Meta(gt=0, le=86400)] = 120
    address_space_bytes: Annotated[int, msgspec.Meta(gt=0)] = 4 * GiB
    file_size_bytes: Annotated[int, msgspec.Meta(gt=0)] = 512 * MiB
    output_bytes: Annotated[int, msgspec.Meta(ge=1024, le=16 * MiB)] = 64 * KiB


class ExecRequest(Message, frozen=True, kw_only=True, tag="sandbox.exec"):
    """Run one shell command in the session's sandbox, with `/bin/sh -c`, in `/workspace`."""

    session_id: SessionId
    workspace: PathText
    command: Annotated[str, msgspec.Meta(min_length=1, max_length=256 * KiB)]
    backend: str = "bwrap"
    network: str = "none"
    limits: Limits = Limits()


class ExecResult(Message, frozen=True, kw_only=True, tag="sandbox.exec_result"):
    """How a command ended and what it printed (each stream cut to the output limit).

    `ended` is `exited` (its own exit status), `signal` (killed by a signal, `signal` says
    which), or `timeout` (the wall clock ran out and the whole process group was killed).
    `stdout_cut` / `stderr_cut` count the bytes left out of the middle of each stream.
    """

    exit_status: int
    ended: Literal["exited", "signal", "timeout"]
    signal: int | None = None
    stdout: Text = ""
    stderr: Text = ""
    stdout_cut: int = 0
    stderr_cut: int = 0
    duration_s: float = 0.0


class ReadFile(Message, frozen=True, kw_only=True, tag="file.read"):
    """Read a stretch of a workspace file, its lines numbered from `offset` (1-based)."""

    session_id: SessionId
    workspace: PathText
    path: PathText
    offset: Annotated[int, msgspec.Meta(ge=1)] = 1
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 2000


class WriteFile(Message, frozen=True, kw_only=True, tag="file.write"):
    """Write a whole workspace file, atomically, creating its directories."""

    session_id: SessionId
    workspace: PathText
    path: PathText
    content: Text


FileRequest = ReadFile | WriteFile
"""What `sandbox.files` takes; later file tools join this union."""


class FileResult(Message, frozen=True, kw_only=True, tag="file.result"):
    """The text a file tool answers with."""

    text: Text


class SandboxCheck(Message, frozen=True, kw_only=True, tag="sandbox.check"):
    """Before a session starts: does a trivial command run in this sandbox?"""

    workspace: PathText
    backend: str = "bwrap"
    network: str = "none"


class SandboxReady(Message, frozen=True, kw_only=True, tag="sandbox.ready"):
    """The sandbox ran the trivial command; `detail` says what it is."""

    backend: str
    detail: str


class SandboxRelease(Message, frozen=True, kw_only=True, tag="sandbox.release"):
    """A session closed: remove what its sandbox kept (a Docker container)."""

    session_id: SessionId


class SandboxReleased(Message, frozen=True, kw_only=True, tag="sandbox.released"):
    """What was removed: how many containers (none for a session that kept nothing)."""

    containers: int = 0
