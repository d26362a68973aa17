"""The largest MCP request the front door reads (`BASTION_MCP_MAX_REQUEST_BYTES`): over it, a
413 whose JSON-RPC error says the size, the limit and what to do, seen by the SDK's client and
by httpx; under it the call runs, or gets the bus's own sentence when the bus cannot carry it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import msgspec
import pytest
from mcp.shared.exceptions import MCPError

from bastion.mcp.frontdoor.bodylimit import id_at_start
from bastion.shared.bus import Client as Bus
from tests.helpers.bus import Plane
from tests.helpers.front_door import DoorOf, mcp_client, new_token, raw_session, text_of

LIMIT = 64 * 1024
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _write(ident: int, content: str) -> bytes:
    return msgspec.json.encode(
        {
            "jsonrpc": "2.0",
            "id": ident,
            "method": "tools/call",
            "params": {"name": "write_file", "arguments": {"path": "big.txt", "content": content}},
        }
    )


def _error(response: httpx2.Response) -> dict[str, Any]:
    assert response.status_code == 413, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600
    assert body["error"]["data"] == {"code": "too_large"}
    return body


def _says_what_to_do(message: str) -> None:
    assert f"more than the {LIMIT} bytes the front door reads" in message
    assert "(BASTION_MCP_MAX_REQUEST_BYTES)" in message
    assert "write a large file in parts" in message and "edit_file" in message


async def test_a_body_declared_over_the_limit_is_413_with_a_json_rpc_error_to_its_request(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    body = _write(7, "x" * (LIMIT + 10))
    async with (
        plane_of(),
        door_of(mcp_max_request_bytes=LIMIT) as url,
        httpx2.AsyncClient(base_url=url) as http,
    ):
        token = await new_token(client, workspace, autonomy="L3")
        refused = await http.post(
            "/mcp", content=body, headers={**HEADERS, "Authorization": f"Bearer {token}"}
        )
        stranger = await http.post("/mcp", content=body, headers=HEADERS)
    error = _error(refused)
    assert error["id"] == 7
    assert error["error"]["message"].startswith(f"the MCP request is {len(body)} bytes, ")
    _says_what_to_do(error["error"]["message"])
    assert stranger.status_code == 401  # the token is checked before the body is read
    assert not (workspace / "big.txt").exists()


async def test_a_chunked_body_over_the_limit_is_413_once_it_counts_past_it(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    body = _write(8, "y" * (3 * LIMIT))

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    async with (
        plane_of(),
        door_of(mcp_max_request_bytes=LIMIT) as url,
        httpx2.AsyncClient(base_url=url) as http,
    ):
        token = await new_token(client, workspace, autonomy="L3")
        refused = await http.post(
            "/mcp", content=chunked(), headers={**HEADERS, "Authorization": f"Bearer {token}"}
        )
    assert "content-length" not in refused.request.headers
    assert refused.request.headers["transfer-encoding"] == "chunked"
    error = _error(refused)
    assert error["id"] == 8
    assert error["error"]["message"].startswith("the MCP request is more than ")
    _says_what_to_do(error["error"]["message"])
    assert not (workspace / "big.txt").exists()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_client_shows_the_sentence_and_a_write_under_the_limit_runs(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, mode: str
) -> None:
    under = "u" * (LIMIT - 1024)
    async with plane_of(), door_of(mcp_max_request_bytes=LIMIT) as url:
        token = await new_token(client, workspace, autonomy="L3")
        async with mcp_client(url, token, mode) as mcp:
            with pytest.raises(MCPError) as refused:
                await mcp.call_tool("write_file", {"path": "big.txt", "content": "o" * LIMIT})
            wrote = await mcp.call_tool("write_file", {"path": "under.txt", "content": under})
    assert refused.value.error.code == -32600
    assert refused.value.error.message.startswith("the MCP request is ")
    _says_what_to_do(refused.value.error.message)
    assert not (workspace / "big.txt").exists()
    assert not wrote.is_error and text_of(wrote) == f"wrote {len(under)} bytes to under.txt"
    assert (workspace / "under.txt").read_text() == under


async def test_a_request_within_a_raised_limit_that_the_bus_cannot_carry_gets_its_sentence(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    # A limit raised to 16 MiB reads a request the bus (8 MiB under `bastion up` and here)
    # cannot carry: the mcp service's bus client refuses it with its typed sentence.
    big = "b" * (9 * 1024 * 1024)
    async with plane_of(), door_of(mcp_max_request_bytes=16 * 1024 * 1024) as url:
        token = await new_token(client, workspace, autonomy="L3")
        async with mcp_client(url, token) as mcp:
            with pytest.raises(MCPError) as refused:
                await mcp.call_tool("write_file", {"path": "big.txt", "content": big})
            after = await mcp.call_tool("write_file", {"path": "small.txt", "content": "fits"})
    message = refused.value.error.message
    assert "more than the 8388608 bytes the bus carries in one message" in message
    assert "write a large file in parts" in message
    assert refused.value.error.code == -32602
    assert refused.value.error.data == {"code": "invalid_input"}
    assert not (workspace / "big.txt").exists()
    assert not after.is_error and (workspace / "small.txt").read_text() == "fits"


@pytest.mark.parametrize(
    ("head", "found"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"argu', 7),
        (b'{"params": {"id": 1, "x": "\\"id\\": 2"}, "id" : "a-1", "method"', "a-1"),
        (b'{"method": "tools/call", "params": {"content": "\\"id\\": 3, ', None),
        (b'[{"jsonrpc": "2.0", "id": 4, "method": "ping"}, {"jsonrpc"', None),
        (b'{"jsonrpc": "2.0", "id": "\\u0041b", "method"', "Ab"),
        (b'{"id": "\\q"}', None),
        (b"not json at all", None),
        (b"", None),
    ],
)
def test_the_request_id_is_read_from_the_top_level_of_the_bodys_start(
    head: bytes, found: int | str | None
) -> None:
    assert id_at_start(head) == found


async def test_a_body_that_stalls_is_408_and_is_not_run(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    """A client that stops sending holds nothing past `BASTION_MCP_BODY_READ_S`."""
    whole = _write(9, "written")
    async with (
        plane_of(),
        door_of(mcp_max_request_bytes=LIMIT, mcp_body_read_s=0.5) as url,
        httpx2.AsyncClient(base_url=url) as http,
    ):
        token = await new_token(client, workspace, autonomy="L3")
        headers = {**HEADERS, "Authorization": f"Bearer {token}"}

        async def stalling() -> AsyncIterator[bytes]:
            yield whole[:20]
            await anyio.sleep(5)
            yield whole[20:]

        stalled = await http.post("/mcp", content=stalling(), headers=headers)
    assert stalled.status_code == 408, stalled.text
    body = stalled.json()
    assert body["error"]["data"] == {"code": "timeout"}
    assert "did not arrive within 0.5 s (BASTION_MCP_BODY_READ_S)" in body["error"]["message"]
    assert not (workspace / "big.txt").exists()


async def test_a_body_that_is_not_standard_json_is_refused_before_the_sdk_reads_it(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    """`NaN` is no JSON: the SDK's parser would take it and the ids it holds, which the
    front door's check of ids in flight cannot read, so it is refused first."""
    async with plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3")
        async with raw_session(url, token) as raw:
            body = (
                b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": '
                b'"write_file", "arguments": {"path": "nan.txt", "content": "x"}, '
                b'"_meta": {"n": NaN}}}'
            )
            refused = await raw.http.post(
                "/mcp", content=body, headers={"Content-Type": "application/json"}
            )
    assert refused.status_code == 400, refused.text
    assert "as RFC 8259 writes JSON (no NaN" in refused.json()["error"]["message"]
    assert not (workspace / "nan.txt").exists()
