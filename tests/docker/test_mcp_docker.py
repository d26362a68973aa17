"""An upstream MCP server over stdio in a Docker sandbox: the test image (never pulled),
its directory at /workspace as its owner, only the variables named, and no container left
once the connection ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp.types import TextContent

from bastion.mcp.gateway.upstream import UpstreamUnreachable, open_upstream
from bastion.proto.mcp import McpServerSpec
from tests.helpers.docker import OWNER_UID

SERVER = Path(__file__).resolve().parents[1] / "mcp_servers" / "stdlib_server.py"


def in_docker(backend: str, directory: Path, **fields: Any) -> McpServerSpec:
    values: dict[str, Any] = {
        "transport": "stdio",
        "command": ("python3", str(SERVER)),
        "directory": str(directory),
        "sandbox": backend,
        "read_only_dirs": (str(SERVER.parent),),
    }
    return McpServerSpec(**(values | fields))


def text(result: Any) -> str:
    [block] = result.content
    assert isinstance(block, TextContent)
    return block.text


def servers(engine: Any) -> list[Any]:
    return list(engine.containers.list(all=True, filters={"label": "io.bastion.mcp=server"}))


async def test_a_server_runs_in_the_image_as_its_directory_owner_and_leaves_nothing(
    engine: Any, backend_name: str, workspace: Path
) -> None:
    spec = in_docker(backend_name, workspace, env=("NOTES_TOKEN",))
    values = {"NOTES_TOKEN": "not-a-real-token", "OTHER": "never given"}
    async with open_upstream(spec, server="plain", values=values) as plain:
        tools = {t.name for t in await plain.list_tools()}
        who = text(await plain.call_tool("whoami", {}, timeout_s=30))
        kept = text(await plain.call_tool("keep", {"text": "from the container"}, timeout_s=30))
        running = servers(engine)
    assert plain.protocol == "2025-11-25"
    assert tools == {"whoami", "keep"}
    assert who.startswith(f"uid={OWNER_UID} cwd=/workspace env=")
    assert "NOTES_TOKEN" in who and "OTHER" not in who
    assert kept == "kept"
    assert (workspace / "kept.txt").read_text() == "from the container"
    assert len(running) == 1
    assert servers(engine) == []


async def test_an_image_that_is_not_here_is_never_pulled(tmp_path: Path, engine: Any) -> None:
    spec = in_docker("docker:nobody/nothing@sha256:" + "0" * 64, tmp_path)
    with pytest.raises(UpstreamUnreachable, match="never pulls"):
        async with open_upstream(spec, server="plain", values={}):
            pass


async def test_a_network_that_restricts_nothing_is_refused(
    engine: Any, backend_name: str, workspace: Path
) -> None:
    spec = in_docker(backend_name, workspace, sandbox_network="host")
    with pytest.raises(UpstreamUnreachable, match="host"):
        async with open_upstream(spec, server="plain", values={}):
            pass
