"""`bastion proto schema`: the JSON Schema of every wire message."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bastion.cli.common import add_verbs
from bastion.proto.schema import MESSAGES, json_schema

__all__ = ["add_parser"]


def run(args: argparse.Namespace) -> int:
    schemas = {name: json_schema(name) for name in MESSAGES}
    if args.out is None:
        json.dump(schemas, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas.items():
        (out / f"{name}.json").write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {len(schemas)} schemas to {out}\n")
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(commands, "proto", help="the wire: message schemas")
    schema = verbs.add_parser(
        "schema",
        help="write the JSON Schema of every message (to stdout, or one file each with --out)",
    )
    schema.add_argument("--out", type=Path, default=None, metavar="DIR")
    schema.set_defaults(handler=run)
