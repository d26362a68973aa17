"""The call-time pin check's listings on one connection: a listing started ahead of a call
(the prefetch) stands for it unless a change notice came since; a kept listing stands only
when the check lets it (a bound > 0), until the server says its tools changed or the bound
passes; a new connection lists afresh (`docs/upstream-mcp.md`, "The call-time check").

The server is the SDK's, over stdio (or Streamable HTTP), speaking 2026-07-28 (its change
events come on a `subscriptions/listen` stream) or, with `--legacy`, the handshake era (a
`notifications/tools/list_changed`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from bastion.mcp.gateway.upstream import Upstream, UpstreamUnreachable, http, open_upstream
from bastion.proto.mcp import McpServerSpec
from bastion.shared.errors import BastionError
from tests.helpers.mcp_upstream import SERVERS, serving_http, stdio_spec

MISBEHAVING = SERVERS / "misbehaving.py"
AS_REVIEWED = "Keep a text."
CHANGED = "Keep a text, and send it to shift.example.net."
FOREVER = 3600.0
"""A bound no test outlives: a listing kept this long is fresh unless the server said otherwise."""


async def _described(upstream: Upstream, max_age_s: float) -> str | None:
    tool = await upstream.tool_for_call("target", max_age_s)
    assert tool is not None
    return tool.description


@pytest.mark.parametrize("era", [(), ("--legacy",)], ids=["2026-07-28", "handshake"])
async def test_a_tool_changed_with_a_notice_is_listed_again(
    tmp_path: Path, era: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bastion.mcp.gateway.upstream.connect")
    spec = stdio_spec(MISBEHAVING, tmp_path, *era)
    async with open_upstream(spec, server="bad", values={}) as bad:
        assert await _described(bad, FOREVER) == AS_REVIEWED
        await bad.call_tool("pid", {}, timeout_s=10)
        assert await _described(bad, FOREVER) == AS_REVIEWED
        await bad.call_tool("shift_loudly", {}, timeout_s=10)
        # The notice may be read after the call's answer: wait for it, bounded above. With
        # a bound of an hour, only the notice can make the connection list again.
        for _ in range(500):
            if await _described(bad, FOREVER) == CHANGED:
                break
            await anyio.sleep(0.02)
        assert await _described(bad, FOREVER) == CHANGED
    # Nor did a change stream that could not be opened (which also makes it list again).
    assert "tool changes ended" not in caplog.text


async def test_a_stream_of_changes_that_ends_is_opened_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over Streamable HTTP a silent stream ends at its read timeout (made 1 s here): the
    listing is made stale, and another stream is opened (it ends the same way, so each end
    logged after the first is of a stream opened again)."""
    caplog.set_level(logging.INFO, logger="bastion.mcp.gateway.upstream.connect")
    monkeypatch.setattr(http, "SSE_READ_TIMEOUT_S", 1.0)
    async with serving_http(MISBEHAVING, tmp_path, "--http") as port:
        spec = McpServerSpec(transport="http", url=f"http://127.0.0.1:{port}/mcp")
        async with open_upstream(spec, server="bad", values={}) as bad:
            assert await _described(bad, FOREVER) == AS_REVIEWED
            for _ in range(400):  # bounded: 20 s
                if caplog.text.count("tool changes ended") >= 2:
                    break
                await anyio.sleep(0.05)
            assert caplog.text.count("tool changes ended") >= 2, caplog.text
            assert bad.alive
            await bad.call_tool("shift", {}, timeout_s=10)
            assert await _described(bad, FOREVER) == CHANGED  # stale since the stream ended


async def test_a_tool_changed_without_a_notice_is_seen_once_the_bound_has_passed(
    tmp_path: Path,
) -> None:
    """Within the bound the kept listing stands (the window a silent change has); past it,
    or with a bound of 0, the tools are listed again before the check."""
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        assert await _described(bad, FOREVER) == AS_REVIEWED
        await bad.call_tool("shift", {}, timeout_s=10)
        assert await _described(bad, FOREVER) == AS_REVIEWED
        await anyio.sleep(0.3)
        assert await _described(bad, 0.2) == CHANGED


async def test_a_bound_of_zero_lists_before_every_check(tmp_path: Path) -> None:
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        assert await _described(bad, 0) == AS_REVIEWED
        await bad.call_tool("shift", {}, timeout_s=10)
        assert await _described(bad, 0) == CHANGED


async def test_a_new_connection_lists_its_tools_afresh(tmp_path: Path) -> None:
    spec = stdio_spec(MISBEHAVING, tmp_path)
    async with open_upstream(spec, server="bad", values={}) as first:
        assert await _described(first, FOREVER) == AS_REVIEWED
        await first.call_tool("shift", {}, timeout_s=10)
    async with open_upstream(spec, server="bad", values={}) as second:
        assert await _described(second, FOREVER) == CHANGED


async def test_a_tool_the_server_no_longer_lists_is_none(tmp_path: Path) -> None:
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        assert await bad.tool_for_call("no_such_tool", 0) is None


async def test_a_call_is_checked_against_the_listing_started_ahead_of_it(tmp_path: Path) -> None:
    """The listing ahead stands for the call even when the server changed just after it
    answered (the window any listing-based check leaves); one asked for now shows it."""
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        ahead = bad.list_ahead()
        await ahead.done.wait()
        await bad.call_tool("shift", {}, timeout_s=10)
        checked = await bad.tool_for_call("target", 0, ahead)
        assert checked is not None and checked.description == AS_REVIEWED
        assert await _described(bad, 0) == CHANGED


@pytest.mark.parametrize("era", [(), ("--legacy",)], ids=["2026-07-28", "handshake"])
async def test_a_notice_after_the_listing_ahead_makes_the_check_list_again(
    tmp_path: Path, era: tuple[str, ...]
) -> None:
    spec = stdio_spec(MISBEHAVING, tmp_path, *era)
    async with open_upstream(spec, server="bad", values={}) as bad:
        ahead = bad.list_ahead()
        await ahead.done.wait()
        await bad.call_tool("shift_loudly", {}, timeout_s=10)
        for _ in range(500):  # the notice may be read after the call's answer: bounded
            checked = await bad.tool_for_call("target", 0, ahead)
            assert checked is not None
            if checked.description == CHANGED:
                break
            await anyio.sleep(0.02)
        assert checked.description == CHANGED


async def test_a_listing_ahead_that_fails_leaves_the_check_to_list_and_say_why(
    tmp_path: Path,
) -> None:
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        with pytest.raises(BastionError):
            await bad.call_tool("die", {}, timeout_s=10)
        ahead = bad.list_ahead()
        await ahead.done.wait()
        assert ahead.tools is None
        with pytest.raises(UpstreamUnreachable, match="no longer connected"):
            await bad.tool_for_call("target", 0, ahead)


async def test_a_kept_listing_needs_no_listing_ahead_only_while_the_bound_lets_it(
    tmp_path: Path,
) -> None:
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        assert not bad.keeps_fresh(FOREVER)  # nothing listed yet
        await bad.list_tools()
        assert bad.keeps_fresh(FOREVER)
        assert not bad.keeps_fresh(0)
