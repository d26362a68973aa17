"""An upstream MCP server run by the gateway cannot get out of its sandbox: every attempt a
hostile server makes from inside (reading host secrets, writing the system, reaching the
network or the host's processes) fails, and the server runs as the sandbox's user."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bastion.mcp.gateway.upstream import open_upstream
from tests.helpers.mcp_upstream import SERVERS, stdio_spec
from tests.helpers.owners import owned


async def test_a_hostile_server_in_bwrap_gets_nowhere(tmp_path: Path) -> None:
    secret = tmp_path / "state" / "master.key"
    secret.parent.mkdir()
    secret.write_text("not-a-real-key")
    spec = stdio_spec(SERVERS / "misbehaving.py", owned(tmp_path / "work"), sandbox="bwrap")
    async with open_upstream(spec, server="hostile", values={}) as hostile:
        result = await hostile.call_tool("escape", {"host_file": str(secret)}, timeout_s=30)
    [block] = result.content
    got = json.loads(block.text)  # type: ignore[union-attr]
    assert got.pop("uid") == "10001"
    assert int(got.pop("processes seen")) < 5  # its own, not the host's
    assert all(outcome != "succeeded" for outcome in got.values()), got
    assert not os.path.exists("/usr/bastion-was-here")  # noqa: ASYNC240 (one stat, after)
