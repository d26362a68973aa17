"""The input of each built-in tool, as an agent writes it: unknown fields refused, sizes bounded.

The orchestrator validates a call's `input` against the tool's struct here before anything
runs, and the same structs give the JSON Schema a client is shown for each tool.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from bastion.proto._base import MAX_PATH, MAX_TEXT, Ingress

__all__ = ["ReadFileInput", "ShellInput", "WriteFileInput"]

ToolPath = Annotated[
    str,
    msgspec.Meta(
        min_length=1, max_length=MAX_PATH, description="A path relative to the workspace."
    ),
]


class ShellInput(Ingress, frozen=True, kw_only=True):
    """`shell`: one command for `/bin/sh -c`, run in the workspace inside the sandbox."""

    command: Annotated[str, msgspec.Meta(min_length=1, max_length=256 * 1024)]
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] | None = None


class ReadFileInput(Ingress, frozen=True, kw_only=True):
    """`read_file`: a stretch of a file, lines numbered from `offset`."""

    path: ToolPath
    offset: Annotated[int, msgspec.Meta(ge=1)] = 1
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 2000


class WriteFileInput(Ingress, frozen=True, kw_only=True):
    """`write_file`: a whole file's new content."""

    path: ToolPath
    content: Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
