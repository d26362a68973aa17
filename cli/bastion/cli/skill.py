"""`bastion skill install|list`: an operator's command, working on the skills dir directly.

It runs as the operator, on the operator's own files, so it reads and copies them itself
rather than through the sandbox service. `install` shows what a skill asks for
(allowed-tools, network, secrets, timeout) and copies it in, atomically, only with
`--accept-permissions`, leaving `granted.json` beside its SKILL.md as the record.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bastion.cli.common import add_output_option, add_verbs, fail, write_items
from bastion.shared.skillmatter import FrontMatter, InvalidSkillFile, front_matter

__all__ = ["GRANTED_FILE", "add_parser", "granted", "permission_lines"]

GRANTED_FILE = "granted.json"


def granted(found: FrontMatter) -> dict[str, Any]:
    """What installing the skill grants, as recorded in `granted.json`."""
    return {
        "allowed_tools": list(found.allowed_tools),
        "network": list(found.network),
        "secrets": list(found.secrets),
        "timeout_s": float(found.timeout) if found.timeout else None,
    }


def permission_lines(found: FrontMatter) -> list[str]:
    """Each permission the skill asks for, in words; none for a skill that asks for none."""
    lines: list[str] = []
    if found.allowed_tools:
        lines.append(
            "allowed-tools (calls it may make without asking): " + ", ".join(found.allowed_tools)
        )
    if found.network == ("true",):
        lines.append("network: any public host, through the egress proxy")
    elif found.network:
        lines.append("network (hosts its scripts may reach): " + ", ".join(found.network))
    if found.secrets:
        lines.append(
            "secrets (set for its scripts, cut from their output): " + ", ".join(found.secrets)
        )
    if found.timeout:
        lines.append(f"timeout: {found.timeout} s (at most the session's limit)")
    return lines


def _read(source: Path) -> tuple[str, FrontMatter] | str:
    """The skill's name and front matter, or why it cannot be installed."""
    manifest = source / "SKILL.md"
    if not manifest.is_file():
        return f"{source} has no SKILL.md: give a skill's directory"
    try:
        found = front_matter(manifest.read_text(encoding="utf-8"), source.resolve().name)
    except InvalidSkillFile as error:
        return error.message
    name = found.name or source.resolve().name
    if not name or "/" in name or name.startswith("."):
        return f"the skill's name {name!r} cannot be a directory name: fix `name:` in its SKILL.md"
    if found.timeout:
        try:
            if float(found.timeout) <= 0:
                raise ValueError
        except ValueError:
            return f"its metadata.bastion-timeout {found.timeout!r} is not seconds above 0: fix it"
    return name, found


def install(args: argparse.Namespace) -> int:
    source: Path = args.directory
    read = _read(source)
    if isinstance(read, str):
        return fail(read)
    name, found = read
    skills_dir: Path = args.skills_dir.expanduser().resolve()
    lines = permission_lines(found)
    sys.stdout.write(f"skill {name} asks for:\n" if lines else f"skill {name} asks for nothing\n")
    for line in lines:
        sys.stdout.write(f"  {line}\n")
    if lines and not args.accept_permissions:
        return fail(
            f"skill {name} was not installed: it asks for the permissions above; install it "
            "with --accept-permissions to grant them"
        )
    skills_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=skills_dir))
    try:
        copy = staging / name
        shutil.copytree(source, copy, symlinks=True)
        record = {
            "skill": name,
            "source": str(source.resolve()),
            "at": datetime.now(UTC).isoformat(),
        }
        record["granted"] = granted(found)  # type: ignore[assignment]
        (copy / GRANTED_FILE).write_text(json.dumps(record, indent=2) + "\n")
        target = skills_dir / name
        if target.exists() or target.is_symlink():
            old = staging / "old"
            os.rename(target, old)
        os.rename(copy, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    what = "with what it asked for granted" if lines else "with nothing granted"
    sys.stdout.write(f"installed {name} in {target} {what}\n")
    return 0


def list_skills(args: argparse.Namespace) -> int:
    skills_dir: Path = args.skills_dir.expanduser()
    if not skills_dir.is_dir():
        return fail(f"there is no skills directory {skills_dir}: give one with --skills-dir")
    items: list[dict[str, Any]] = []
    for entry in sorted(skills_dir.iterdir()):
        manifest = entry / "SKILL.md"
        if entry.name.startswith(".") or not manifest.is_file():
            continue
        try:
            found = front_matter(manifest.read_text(encoding="utf-8"), entry.name)
        except InvalidSkillFile as error:
            items.append({"name": entry.name, "usable": False, "problem": error.message})
            continue
        items.append(
            {
                "name": entry.name,
                "usable": True,
                "description": found.description,
                "asks": granted(found),
                "installed_with_bastion": (entry / GRANTED_FILE).is_file(),
                "permissions": permission_lines(found),
            }
        )
    if args.output == "json":
        write_items(items, skills_dir=str(skills_dir))
        return 0
    for item in items:
        if not item["usable"]:
            sys.stdout.write(f"{item['name']}\t\t{item['problem']}\t(not usable)\n")
            continue
        record = "granted.json" if item["installed_with_bastion"] else "not installed with bastion"
        asks = "; ".join(item["permissions"]) or "asks for nothing"
        sys.stdout.write(f"{item['name']}\t{item['description']}\t{asks}\t({record})\n")
    return 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    verbs = add_verbs(commands, "skill", help="install and list skills (on this machine)")
    installing = verbs.add_parser("install", help="show what a skill asks for; install it")
    installing.add_argument("directory", type=Path, metavar="DIR", help="the skill's directory")
    installing.add_argument(
        "--accept-permissions",
        action="store_true",
        help="grant what the skill asks for (without it, nothing is installed)",
    )
    installing.set_defaults(handler=install)
    listing = verbs.add_parser("list", help="the skills in the skills dir and what each asks for")
    add_output_option(listing)
    listing.set_defaults(handler=list_skills)
    for verb in (installing, listing):
        verb.add_argument(
            "--skills-dir",
            type=Path,
            default=Path(os.environ.get("BASTION_SKILLS_DIR", "skills")),
            metavar="D",
            help="the skills directory (default: $BASTION_SKILLS_DIR or ./skills)",
        )
