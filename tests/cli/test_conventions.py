"""The CLI's conventions: one `-o table|json` on every command that lists, shows or reads,
lists as `{"items": [...]}`, and exit statuses that tell a degraded Bastion apart."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import anyio

from bastion.cli.main import COMMANDS, parser
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.vault import key_file, vault_settings

READERS = {
    "agent run", "agent continue", "approvals list", "approvals approve", "approvals decline",
    "audit show", "audit tail",
    "hooks list", "mcp list", "mcp review", "mcp resources list", "mcp resources read",
    "mcp prompts list", "secret list", "skill list", "status", "token create", "token list",
}  # fmt: skip
"""Every command that lists, shows or reads, by its words."""


def _commands(
    command: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> dict[str, argparse.ArgumentParser]:
    """Every runnable command of the `bastion` parser, by its words."""
    groups = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        return {" ".join(words): command}
    found: dict[str, argparse.ArgumentParser] = {}
    for name, sub in groups[0].choices.items():
        found |= _commands(sub, (*words, name))
    return found


def _option(command: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in command._actions if flag in a.option_strings), None)


def test_every_command_that_reads_takes_the_same_output_option_and_one_that_writes_out() -> None:
    commands = _commands(parser())
    assert set(commands) >= READERS
    for words, command in commands.items():
        output = _option(command, "-o")
        if words not in READERS:
            assert output is None, f"`bastion {words}` gives -o another meaning"
            continue
        assert output is not None, f"`bastion {words}` has no -o"
        assert output.option_strings == ["-o", "--output"] and output.default == "table"
        assert tuple(output.choices or ()) == ("table", "json")
        assert output.help == _option(commands["status"], "-o").help  # type: ignore[union-attr]
    for writer in ("mcp keygen", "mcp sign", "nats config", "proto schema"):
        assert _option(commands[writer], "--out") is not None, f"`bastion {writer}` has no --out"


def test_hooks_and_skills_list_as_items_in_json(tmp_path: Path) -> None:
    hooks = _run("hooks", "list", "--state-dir", str(tmp_path), "-o", "json")
    skills = _run("skill", "list", "--skills-dir", str(tmp_path), "-o", "json")
    assert (hooks.returncode, json.loads(hooks.stdout)) == (0, {"items": []})
    assert json.loads(skills.stdout) == {"skills_dir": str(tmp_path), "items": []}
    added = _run("hooks", "add", "--event", "run-end", "--state-dir", str(tmp_path), "--", "true")
    assert added.returncode == 0, added.stderr
    listed = json.loads(_run("hooks", "list", "--state-dir", str(tmp_path), "-o", "json").stdout)
    assert listed["items"] == [
        {"number": 1, "event": "run-end", "command": ["true"], "tools": [], "timeout_s": 30.0}
    ]


async def test_status_with_a_service_missing_exits_four_naming_the_missing_ones(
    run_service: ServiceRunner, nats_url: str, tmp_path: Path
) -> None:
    async with run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "v"))):
        shown = await anyio.to_thread.run_sync(
            partial(_run, "status", "--nats", nats_url, "-o", "json")
        )
        table = await anyio.to_thread.run_sync(partial(_run, "status", "--nats", nats_url))
    assert shown.returncode == 4, shown.stderr
    answer = json.loads(shown.stdout)
    assert [i["name"] for i in answer["items"]] == ["vault"]
    assert answer["missing"] == ["orchestrator", "policy", "sandbox", "egress", "mcp"]
    assert table.returncode == 4 and "missing: orchestrator, policy" in table.stdout


def test_bad_usage_exits_two_and_an_error_of_the_call_exits_one(tmp_path: Path) -> None:
    bad_flag = _run("status", "--no-such-flag")
    bad_id = _run("approvals", "approve", "nope", "--state-dir", str(tmp_path))
    unreachable = _run("approvals", "list", "--nats", "nats://127.0.0.1:9")
    assert bad_flag.returncode == 2 and bad_id.returncode == 2
    assert "is not a request id" in bad_id.stderr
    bad_token = _run("token", "revoke", "not-a-token", "--state-dir", str(tmp_path))
    assert bad_token.returncode == 2 and "is not a token id" in bad_token.stderr
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr


def test_a_log_level_that_is_not_one_is_bad_usage_of_every_command() -> None:
    loud = _run("status", "--nats", "nats://127.0.0.1:9", env={"BASTION_LOG_LEVEL": "loud"})
    quiet = _run("status", "--nats", "nats://127.0.0.1:9", env={"BASTION_LOG_LEVEL": "debug"})
    assert loud.returncode == 2 and "BASTION_LOG_LEVEL is not valid" in loud.stderr
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bastion.cli", *args],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_each_command_is_added_by_the_module_the_entry_point_names_for_it() -> None:
    for command in COMMANDS:
        alone = _commands(parser(command))
        assert alone and all(words.split()[0] == command for words in alone), command
    assert set(_commands(parser())) == {w for c in COMMANDS for w in _commands(parser(c))}


def _modules_loaded_by(*argv: str) -> set[str]:
    """The modules a `bastion` run of `argv` imported, read in the process that ran it."""
    program = (
        "import sys\n"
        "from bastion.cli.main import main\n"
        f"sys.argv = ['bastion', *{list(argv)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(' '.join(sys.modules))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    return set(ran.stderr.split())


def test_a_command_imports_only_its_own_module_and_version_none() -> None:
    version = _modules_loaded_by("--version")
    status = _modules_loaded_by("status", "--help")
    assert not {m for m in version if m.startswith(("bastion.cli.", "bastion.shared.bus"))} - {
        "bastion.cli.main",
        "bastion.cli.exits",
    }
    assert "bastion.cli.status" in status and "mcp" not in status
    assert not {m for m in status if m.startswith("bastion.cli.")} & {
        "bastion.cli.mcp",
        "bastion.cli.up",
        "bastion.cli.agent",
    }
