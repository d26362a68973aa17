"""`bastion mcp keygen|sign`: for an operator who publishes an MCP server with signed tools.

Both work on local files only. `keygen` writes a new ECDSA P-256 private key (mode 0600)
and prints its public key, to give `bastion mcp add --public-key`; `sign` adds a signature
to each tool definition of a JSON list (a server's tools/list `tools`), for the server to
serve as they are. Neither ever overwrites a file. `docs/signed-tools.md` has the format.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from bastion.mcp.gateway.signing import (
    generate_private_key,
    key_fingerprint,
    load_private_key,
    private_key_pem,
    public_key_pem,
    sign_tool_dict,
)
from bastion.shared.errors import InvalidInput

__all__ = ["add_sign_commands"]


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise InvalidInput(f"cannot read the {what} {path}: {error.strerror}") from None


def _write_new(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a file that must not exist yet (O_EXCL): never replace one."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise InvalidInput(f"{path} exists; it is never overwritten: give a new path") from None
    except OSError as error:
        raise InvalidInput(f"cannot create {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _tools_of(data: bytes, path: Path) -> list[dict[str, Any]]:
    try:
        tools = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidInput(f"{path} is not JSON ({error})") from None
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise InvalidInput(
            f"{path} is not a JSON list of tool definitions (a tools/list result's `tools`)"
        )
    return tools


def sign(args: argparse.Namespace) -> int:
    key = load_private_key(_read(args.key, "private key"))
    tools = _tools_of(_read(args.tools, "tools file"), args.tools)
    signed = []
    for index, tool in enumerate(tools):
        try:
            signed.append(sign_tool_dict(tool, key))
        except InvalidInput as error:
            raise InvalidInput(f"tool {index} of {args.tools}: {error.message}") from None
    text = json.dumps(signed, indent=2, ensure_ascii=False) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        _write_new(args.out, text.encode())
    sys.stderr.write(
        f"signed {len(signed)} tool{'' if len(signed) == 1 else 's'} with the key of fingerprint"
        f" {key_fingerprint(key.public_key())}\n"
    )
    return 0


def keygen(args: argparse.Namespace) -> int:
    key = generate_private_key()
    _write_new(args.out, private_key_pem(key), mode=0o600)
    sys.stdout.write(public_key_pem(key.public_key()))
    sys.stderr.write(
        f"wrote the private key to {args.out} (keep it secret); the public key printed"
        f" has fingerprint {key_fingerprint(key.public_key())}\n"
    )
    return 0


def add_sign_commands(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `keygen` and `sign` to the `bastion mcp` group's subcommands."""
    making = verbs.add_parser("keygen", help="write a new P-256 signing key; print its public key")
    making.add_argument(
        "--out", type=Path, required=True, metavar="PRIVATE.pem", help="a new file for the key"
    )
    making.set_defaults(handler=keygen)
    signing = verbs.add_parser("sign", help="sign a JSON list of tool definitions")
    signing.add_argument(
        "--key", type=Path, required=True, metavar="PRIVATE.pem", help="a P-256 private key"
    )
    signing.add_argument("tools", type=Path, metavar="TOOLS.json", help="the tool definitions")
    signing.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="OUT.json",
        help="a new file for the signed tools (default: standard output)",
    )
    signing.set_defaults(handler=sign)
