"""Under `bastion up`: a token made with the CLI, the SDK's MCP client at /mcp, a revoke."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent

from tests.helpers.owners import owned
from tests.helpers.running_up import Up, bastion

pytestmark = pytest.mark.e2e


RUN_CODE = (
    "print(tools.read_file(path='out.txt').split()[-1])\n"
    "try:\n"
    "    tools.write_file(path='out.txt', content='lost')\n"
    "except ToolError as error:\n"
    "    print(error.message)\n"
)
"""A program reading the shell's file and refused a write, through every service's identity."""


async def _shell_over_mcp(url: str, token: str) -> tuple[set[str], str, list[str], str]:
    told: list[str] = []

    async def on_progress(_done: float, _total: float | None, message: str | None) -> None:
        told.append(message or "")

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120)
    )
    async with (
        http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as mcp,
    ):
        listed = await mcp.list_tools()
        ran = await mcp.call_tool("shell", {"command": "echo from-claude > out.txt; cat out.txt"})
        # streamed as it is written, through the NATS users and permissions `bastion up` makes
        streamed = await mcp.call_tool(
            "shell",
            {"command": "for i in 1 2 3; do echo tick-$i; sleep 0.3; done"},
            progress_callback=on_progress,
        )
        coded = await mcp.call_tool("run_code", {"code": RUN_CODE})
    [content] = ran.content
    assert isinstance(content, TextContent) and not ran.is_error, ran
    assert not streamed.is_error, streamed
    [program] = coded.content
    assert isinstance(program, TextContent) and not coded.is_error, coded
    return {t.name for t in listed.tools}, content.text, told, program.text


def test_an_mcp_client_with_a_cli_token_runs_a_shell_command_and_a_revoked_token_is_refused(
    up: Up, tmp_path: Path
) -> None:
    workspace = owned(tmp_path / "work")
    [line] = [o for o in up.output if o.startswith("front door: ")]
    found = re.match(r"front door: (\S+) \(token in .+\)$", line)
    assert found is not None
    url = found[1]
    created = bastion(
        "token", "create", "--agent", "claude-code", "--autonomy", "L3",
        "--workspace", str(workspace), "--shell",
        state_dir=up.state_dir,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    token = created.stdout.splitlines()[0]
    assert token.startswith("bst_") and len(token) > 40

    tools, text, told, printed = anyio.run(_shell_over_mcp, url, token)
    assert "".join(m for m in told if not m.startswith("shell runs (")) == (
        "tick-1\ntick-2\ntick-3\n"
    )
    assert {"shell", "write_file", "read_file", "run_code"} <= tools
    assert text.endswith("from-claude")
    assert printed == (
        "from-claude\nrun_code calls only tools that read; make the write_file call yourself\n"
    )
    assert (workspace / "out.txt").read_text() == "from-claude\n"

    listed = bastion("token", "list", state_dir=up.state_dir)
    assert listed.returncode == 0 and token not in listed.stdout
    [row] = listed.stdout.splitlines()
    token_id = row.split()[0]
    assert "claude-code" in row and "L3" in row and "shell" in row
    revoked = bastion("token", "revoke", token_id, state_dir=up.state_dir)
    assert revoked.returncode == 0 and f"revoked token {token_id}" in revoked.stdout
    refused = httpx2.post(
        f"{url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    assert refused.status_code == 401
    assert "bastion token create" in refused.json()["error"]["message"]
