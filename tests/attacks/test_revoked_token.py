"""An agent whose token was revoked keeps nothing running: its background tasks stop, its
running calls end and its MCP sessions are gone, on every front-door replica — the one
that handled the revoke and the one that did not. Two real front doors, the official MCP
SDK as the client, a real orchestrator and sandbox service (bubblewrap)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import httpx2

from bastion.mcp.frontdoor.records import SessionRecords
from bastion.mcp.frontdoor.tokens import hash_of
from bastion.proto import subjects
from bastion.proto.frontdoor import ListTokens, RevokeToken, TokenList, TokenRevoked
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request
from tests.helpers.bus import Plane
from tests.helpers.front_door import DoorOf, new_token
from tests.helpers.revoked import (
    closed,
    long_call,
    looping,
    no_process,
    running_commands,
    sleeper,
    tasks_stopped,
    two_sessions,
    until,
)

ACCEPT = "application/json, text/event-stream"


async def test_a_revoked_tokens_tasks_calls_and_sessions_end_on_every_replica(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of() as url_a, door_of() as url_b:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        listed = await request(
            client, subjects.FRONTDOOR_TOKEN_LIST, ListTokens(), TokenList, timeout_s=10
        )
        [info] = listed.tokens
        async with two_sessions(url_a, url_b, token) as on:
            sessions = {name: await looping(mcp, name) for name, mcp in on.items()}
            records = await SessionRecords.open(client)
            mcp_ids = [r.mcp_session_id for r in await records.of_token(hash_of(token))]
            assert len(mcp_ids) == len(on)
            ended: dict[str, str | Exception] = {}
            async with anyio.create_task_group() as group:
                for name, mcp in on.items():
                    group.start_soon(long_call, mcp, name, ended)
                await until(
                    lambda: all(
                        (workspace / f"started-{n}").exists() and running_commands(sleeper(n))
                        for n in on
                    ),
                    "both long calls run",
                )
                # One replica takes the revoke (a queue group); the other holds a session
                # of the token too, with its loop and its long call.
                revoked: TokenRevoked = await request(
                    client,
                    subjects.FRONTDOOR_TOKEN_REVOKE,
                    RevokeToken(token_id=info.token_id),
                    TokenRevoked,
                    timeout_s=60,
                )
                assert revoked.token_id == info.token_id
                for name, session_id in sessions.items():
                    await until(
                        partial(tasks_stopped, client, session_id), f"{name}'s task stopped"
                    )
                    await until(partial(closed, client, session_id), f"session {name} closed")
                await until(lambda: len(ended) == len(on), "both long calls answered")
        for name in sessions:
            # Each client was answered: its call cancelled, saying why.
            answer = ended[name]
            assert isinstance(answer, str), answer
            assert answer.startswith("cancelled:"), answer
            assert f"by mcp:token {info.token_id} revoked" in answer
            await until(partial(no_process, sleeper(name)), f"{name}'s call ended")
            assert no_process(f"loop-{name}")
            loop = workspace / f"loop-{name}"
            size = loop.stat().st_size
            await anyio.sleep(0.5)
            assert loop.stat().st_size == size
        # The MCP sessions are gone on every replica: no record, and neither replica
        # serves them.
        assert await records.of_token(hash_of(token)) == []
        async with httpx2.AsyncClient(timeout=30) as http:
            for url in (url_a, url_b):
                for mcp_id in mcp_ids:
                    refused = await http.post(
                        f"{url}/mcp",
                        json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
                        headers={
                            "Authorization": f"Bearer {token}",
                            "Accept": ACCEPT,
                            "Mcp-Session-Id": mcp_id,
                        },
                    )
                    assert refused.status_code in (401, 404), refused.text
