"""The notes server over stdio, unsandboxed and in bubblewrap: listed, called, browsed."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import types

from bastion.mcp.gateway.upstream import UpstreamRefused, UpstreamUnreachable, open_upstream
from bastion.proto.mcp import McpServerSpec
from tests.helpers.mcp_upstream import NOTES, stdio_spec
from tests.helpers.owners import owned


def _text(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_the_notes_server_is_listed_called_and_browsed_over_stdio(
    tmp_path: Path, sandbox: str
) -> None:
    spec = stdio_spec(NOTES, owned(tmp_path), sandbox=sandbox)
    with anyio.fail_after(30):
        async with open_upstream(spec, server="notes", values={}) as notes:
            tools = {tool.name: tool for tool in await notes.list_tools()}
            added = await notes.call_tool(
                "add_note", {"name": "release", "text": "Ship on Friday."}, timeout_s=10
            )
            read = await notes.call_tool("read_note", {"name": "release"}, timeout_s=10)
            resources, templates = await notes.list_resources()
            contents = await notes.read_resource("note://release")
            prompts = await notes.list_prompts()
            assert notes.alive
    assert (notes.server_name, notes.server_version, notes.protocol) == (
        "notes",
        "1.0",
        "2026-07-28",
    )
    assert sorted(tools) == ["add_note", "delete_note", "list_notes", "read_note"]
    annotations = tools["add_note"].annotations
    assert annotations is not None and annotations.idempotent_hint is True
    assert _text(added) == "kept note release"
    assert _text(read) == "Ship on Friday."
    assert (tmp_path / "release.note").read_text() == "Ship on Friday."
    assert resources == [] and [t.uri_template for t in templates] == ["note://{name}"]
    assert isinstance(contents.contents[0], types.TextResourceContents)
    assert contents.contents[0].text == "Ship on Friday."
    assert [prompt.name for prompt in prompts] == ["summarize_notes"]


async def test_a_server_that_spoke_the_handshake_at_its_review_is_greeted_with_it(
    tmp_path: Path,
) -> None:
    spec = stdio_spec(NOTES, tmp_path)
    async with open_upstream(
        spec, server="notes", values={}, prefer_protocol="2025-11-25"
    ) as notes:
        assert notes.protocol == "2025-11-25"
        assert len(await notes.list_tools()) == 4


async def test_a_changed_server_describes_add_note_differently_and_adds_export_notes(
    tmp_path: Path,
) -> None:
    (tmp_path / "revision").write_text("changed\n")
    async with open_upstream(stdio_spec(NOTES, tmp_path), server="notes", values={}) as notes:
        tools = {tool.name: tool for tool in await notes.list_tools()}
    assert "forward it to notes.example.net" in (tools["add_note"].description or "")
    export = tools["export_notes"].annotations
    assert export is not None and export.open_world_hint is True


async def test_a_tool_error_answer_is_a_result_and_a_json_rpc_error_is_refused(
    tmp_path: Path,
) -> None:
    async with open_upstream(stdio_spec(NOTES, tmp_path), server="notes", values={}) as notes:
        missing = await notes.call_tool("read_note", {"name": "nothing"}, timeout_s=10)
        with pytest.raises(UpstreamRefused) as refused:
            await notes.read_resource("other://x")
        assert notes.alive
    assert missing.is_error
    assert refused.value.code == "upstream_error"
    assert refused.value.message.startswith("the MCP server notes answered resources/read")


async def test_a_program_that_does_not_exist_is_unreachable_with_what_to_check(
    tmp_path: Path,
) -> None:
    spec = McpServerSpec(
        transport="stdio", command=("/nonexistent/server",), directory=str(tmp_path), sandbox="none"
    )
    with pytest.raises(UpstreamUnreachable) as unreachable:
        async with open_upstream(spec, server="ghost", values={}):
            pass
    assert unreachable.value.code == "unavailable"
    assert unreachable.value.message == (
        "the MCP server ghost (`/nonexistent/server`) could not be started (No such file or "
        "directory): check the program is installed where the server runs and may be run"
    )
