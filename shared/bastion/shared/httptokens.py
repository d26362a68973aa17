"""The front door's bearer tokens file: where it is, how `bastion up` makes one, how it reads.

One token a line; a line `label:token` names who holds it (the label goes into `by` as
`http:<label>`), a bare token is labelled by its line number. Blank lines and `#` comments
are skipped. The file must not be readable by group or others: a token is a key to every
approval, so a file that leaks it is refused rather than trusted.
"""

from __future__ import annotations

import re
import secrets
import stat
from pathlib import Path

from bastion.shared.errors import BastionError
from bastion.shared.keyfiles import create_owner_only

__all__ = ["UnsafeTokensFile", "create_tokens_file", "read_tokens", "tokens_path"]

_LABEL = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
MIN_TOKEN_LENGTH = 16


class UnsafeTokensFile(BastionError):
    """The tokens file is readable by others, or a line of it is not a usable token."""


def tokens_path(state_dir: Path) -> Path:
    """The default tokens file of a state dir."""
    return state_dir / "http-tokens"


def create_tokens_file(path: Path) -> bool:
    """Write `path` (0600) with one random token labelled `local`, unless it exists; True if
    it was created."""
    return create_owner_only(path, f"local:{secrets.token_urlsafe(32)}\n".encode())


def read_tokens(path: Path) -> dict[str, str]:
    """The tokens of `path` by label; empty when the file does not exist.

    Raises:
        UnsafeTokensFile: group or others may read it, or a line is not `[label:]token`.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UnsafeTokensFile(
            f"the HTTP tokens file {path} is readable by others (mode {stat.S_IMODE(mode):o}): "
            f"make it private with `chmod 600 {path}`, and replace its tokens if others read them"
        )
    tokens: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        label, _, token = line.rpartition(":")
        label = label or f"line{number}"
        if not _LABEL.match(label) or len(token) < MIN_TOKEN_LENGTH or token.isspace():
            raise UnsafeTokensFile(
                f"line {number} of the HTTP tokens file {path} is not `label:token` with a "
                f"label of letters, digits, `_.@-` and a token of {MIN_TOKEN_LENGTH} characters "
                "or more: fix or remove that line"
            )
        tokens[label] = token
    return tokens
