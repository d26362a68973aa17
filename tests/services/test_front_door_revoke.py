"""How a revoked token's sessions end, each way on its own: the revoke's broadcast alone
(the sweeps off) ends the calls a replica that did not take the revoke runs; and a token
gone from `bastion_agent_tokens` without its revoke's ending — the replica that revoked it
stopped right after, or the broadcast was missed — is ended by the front doors' sweep: its
background loop stopped, its running call cancelled, its Bastion session closed and its
MCP session's record forgotten. Real front doors, the official MCP SDK as the client, a
real orchestrator and sandbox service."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio

from bastion.mcp.frontdoor.records import SessionRecords
from bastion.mcp.frontdoor.tokens import hash_of
from bastion.proto import subjects
from bastion.proto.frontdoor import ListTokens, RevokeToken, TokenInfo, TokenList, TokenRevoked
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request
from bastion.shared.kv import TypedBucket
from tests.helpers.bus import Plane
from tests.helpers.front_door import DoorOf, mcp_client, new_token
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

NO_SWEEP = {"mcp_revoked_sweep_s": 3600.0}
"""A front door whose sweep does not run within a test: only the revoke ends anything."""


async def test_the_revokes_broadcast_alone_ends_the_calls_on_every_replica(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of(**NO_SWEEP) as url_a, door_of(**NO_SWEEP) as url_b:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        listed = await request(
            client, subjects.FRONTDOOR_TOKEN_LIST, ListTokens(), TokenList, timeout_s=10
        )
        [info] = listed.tokens
        async with two_sessions(url_a, url_b, token) as on:
            ended: dict[str, str | Exception] = {}
            async with anyio.create_task_group() as group:
                for name, mcp in on.items():
                    group.start_soon(long_call, mcp, name, ended)
                await until(
                    lambda: all(running_commands(sleeper(n)) for n in on), "both long calls run"
                )
                # Whichever replica takes it, the other runs a call of the token: only the
                # broadcast reaches it (the revoking replica's close waits for the call).
                await request(
                    client,
                    subjects.FRONTDOOR_TOKEN_REVOKE,
                    RevokeToken(token_id=info.token_id),
                    TokenRevoked,
                    timeout_s=60,
                )
                await until(lambda: len(ended) == len(on), "both long calls answered")
    for name, answer in ended.items():
        assert isinstance(answer, str) and answer.startswith("cancelled:"), (name, answer)
        assert no_process(sleeper(name))


async def test_a_token_deleted_without_its_revokes_ending_is_ended_by_the_sweep(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with plane_of(), door_of(mcp_revoked_sweep_s=0.5) as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token, delete_on_exit=False) as mcp:
            session_id = await looping(mcp, "a")
            records = await SessionRecords.open(client)
            assert len(await records.of_token(hash_of(token))) == 1
            ended: dict[str, str | Exception] = {}
            async with anyio.create_task_group() as group:
                group.start_soon(long_call, mcp, "a", ended)
                await until(
                    lambda: (
                        (workspace / "started-a").exists() and bool(running_commands(sleeper("a")))
                    ),
                    "the long call runs",
                )
                # What a revoke does first, and all a replica that stopped then did.
                tokens = await TypedBucket.open(client, subjects.FRONTDOOR_TOKENS_BUCKET, TokenInfo)
                await tokens.delete(hash_of(token))
                await until(partial(tasks_stopped, client, session_id), "the task stopped")
                await until(partial(closed, client, session_id), "the session closed")
                await until(lambda: "a" in ended, "the long call answered")
        answer = ended["a"]
        assert isinstance(answer, str) and answer.startswith("cancelled:"), answer
        await until(partial(no_process, sleeper("a")), "the call's command ended")
        assert no_process("loop-a")
        assert await records.of_token(hash_of(token)) == []


async def test_a_session_whose_close_failed_at_the_revoke_is_closed_by_a_later_sweep(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path
) -> None:
    async with door_of(mcp_revoked_sweep_s=0.5) as url:
        async with plane_of():
            token = await new_token(client, workspace, autonomy="L3", shell=True)
            [info] = (
                await request(
                    client, subjects.FRONTDOOR_TOKEN_LIST, ListTokens(), TokenList, timeout_s=10
                )
            ).tokens
            async with mcp_client(url, token, delete_on_exit=False) as mcp:
                session_id = await looping(mcp, "a")
        # No orchestrator answers the revoke's close: the record stays for the sweep.
        await request(
            client,
            subjects.FRONTDOOR_TOKEN_REVOKE,
            RevokeToken(token_id=info.token_id),
            TokenRevoked,
            timeout_s=60,
        )
        records = await SessionRecords.open(client)
        assert [r.bastion_session_id for r in await records.of_token(hash_of(token))] == [
            session_id
        ]
        async with plane_of():
            await until(partial(closed, client, session_id), "the session closed")
            await until(partial(forgotten, records, hash_of(token)), "its record forgotten")


async def forgotten(records: SessionRecords, token_hash: str) -> bool:
    return await records.of_token(token_hash) == []
