"""The exit statuses of `bastion` commands, one meaning each (the table in docs/cli.md)."""

from __future__ import annotations

import sys
from typing import Final

__all__ = ["DEGRADED", "ERROR", "INTERRUPTED", "OK", "READER_LEFT", "USAGE", "WAITING", "fail"]

OK: Final = 0
"""Done as asked."""
ERROR: Final = 1
"""An error of Bastion's or of the call: refused, not found, unreachable, timed out."""
USAGE: Final = 2
"""Bad usage: an unknown flag, a value that is not one, a script that is not a script."""
WAITING: Final = 3
"""A call waits for a person: the session stays open until someone answers it."""
DEGRADED: Final = 4
"""Bastion answered, but not whole: `bastion status` found a service missing."""
INTERRUPTED: Final = 130
"""Ctrl-C (128 + SIGINT)."""
READER_LEFT: Final = 141
"""Whoever read the output stopped reading (128 + SIGPIPE)."""


def fail(message: str, status: int = ERROR) -> int:
    """Say `message` as the command's error on stderr; the exit status to return."""
    sys.stderr.write(f"error: {message}\n")
    return status
