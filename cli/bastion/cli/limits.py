"""`--sandbox-timeout` and `--sandbox-limit NAME=VALUE`: the limits a session asks for."""

from __future__ import annotations

import argparse
import re

import msgspec

from bastion.proto.session import SessionLimits

__all__ = ["add_limit_options", "session_limits"]

_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_NAMES = tuple(f.name for f in msgspec.structs.fields(SessionLimits))


def limit_pair(text: str) -> tuple[str, float]:
    """`NAME=VALUE` with VALUE a number; a `_bytes` limit may end in k, m or g (binary)."""
    name, equals, value = text.partition("=")
    if not equals or name not in _NAMES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME=VALUE with NAME one of: {', '.join(_NAMES)}"
        )
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", value.strip())
    if match is None or (match.group(2) and not name.endswith("_bytes")):
        raise argparse.ArgumentTypeError(
            f"{name}={value} is not a number"
            + (" (sizes may end in k, m or g)" if name.endswith("_bytes") else "")
        )
    return name, float(match.group(1)) * _UNITS[match.group(2).lower()]


def session_limits(timeout_s: float | None, pairs: list[tuple[str, float]]) -> SessionLimits:
    """The limits asked for on the command line, checked against their bounds.

    Raises:
        ValueError: a value is out of its bounds; the sentence names the limit.
    """
    given = dict(pairs)
    if timeout_s is not None:
        given["wall_s"] = timeout_s
    whole = {name: value if name == "wall_s" else int(value) for name, value in given.items()}
    try:
        return msgspec.convert(whole, SessionLimits)
    except msgspec.ValidationError as error:
        raise ValueError(f"a sandbox limit is out of bounds: {error}") from None


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sandbox-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wall-clock limit of each command (default 120)",
    )
    parser.add_argument(
        "--sandbox-limit",
        type=limit_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"another limit of each command, repeatable: {', '.join(_NAMES)}",
    )
