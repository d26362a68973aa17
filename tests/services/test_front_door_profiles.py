"""A front-door token carries a whole session's profile, checked when it is created as a
session's opening checks it; and the run hooks fire for front-door sessions as for
`bastion agent run`. Real services on a real NATS, the MCP SDK's client at /mcp."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg

from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.hooks.service import HookRunner
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.events import SessionClosed, SessionOpened
from bastion.proto.frontdoor import (
    CreateToken,
    ListTokens,
    RevokeToken,
    TokenCreated,
    TokenList,
    TokenRevoked,
)
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request, round_trip
from bastion.shared.codec import decode
from bastion.shared.errors import BastionError
from bastion.shared.hookfile import CommandHook, hooks_path, save_hooks
from bastion.shared.settings import BusSettings
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.egress import guard_network, web_server
from tests.helpers.front_door import DoorOf, mcp_client, new_token, read_json, text_of
from tests.helpers.owners import owned
from tests.helpers.session import session_of


def _skills(root: Path) -> Path:
    """A skills directory with one skill, `hello`."""
    (root / "hello").mkdir(parents=True)
    (root / "hello" / "SKILL.md").write_text("---\nname: hello\n---\nSay hello.\n")
    return root


async def _opened_ids(bus: Bus) -> list[str]:
    """The ids of the sessions opened from now on (their `session_opened` events)."""
    opened: list[str] = []

    async def seen(msg: Msg) -> None:
        opened.append(decode(msg.data, SessionOpened).session_id)

    await bus.subscribe(subjects.event("session_opened", "*"), cb=seen)
    await round_trip(bus)
    return opened


async def _refusal(bus: Bus, subject: str, ask: object, answer: type[Any]) -> BastionError:
    with pytest.raises(BastionError) as refused:
        await request(bus, subject, ask, answer, timeout_s=30)
    return refused.value


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_tokens_skills_dir_and_declared_network_are_its_sessions(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path, mode: str
) -> None:
    skills = _skills(tmp_path / "skills")
    opened = await _opened_ids(client)
    async with plane_of(), door_of() as url:
        token = await new_token(
            client, workspace, shell=True, network="declared", skills_dir=str(skills), ask=False
        )
        async with mcp_client(url, token, mode) as mcp:
            listed = await mcp.list_tools()
            read = await mcp.call_tool("skill_read", {"name": "hello"})
        [session_id] = opened
        session = await session_of(client, session_id)
    assert {"skill_read", "skill_run", "shell"} <= {t.name for t in listed.tools}
    assert not read.is_error and "Say hello." in text_of(read)
    assert session.network == "declared"
    assert session.skills_dir == str(skills)
    assert session.ask is False


async def test_a_profile_a_session_could_not_open_with_is_refused_at_creation_with_its_sentence(
    client: Bus, plane_of: Plane, door_of: DoorOf, sandbox_state_dir: Path, tmp_path: Path
) -> None:
    inside_state = owned(sandbox_state_dir / "agents-work")
    workspace = owned(tmp_path / "work")
    profiles: list[dict[str, Any]] = [
        {"workspace": str(inside_state)},
        {"workspace": str(workspace), "skills_dir": str(tmp_path / "no-such-skills")},
        {"workspace": str(workspace), "skills_dir": str(workspace / "skills")},
        {"shell": True},
        {"workspace": "relative/dir"},
    ]
    async with plane_of(), door_of():
        for profile in profiles:
            (workspace / "skills").mkdir(exist_ok=True)
            opening = await _refusal(
                client,
                subjects.SESSION_OPEN,
                msgspec.convert({"agent": "claude", **profile}, OpenSession),
                SessionInfo,
            )
            creating = await _refusal(
                client,
                subjects.FRONTDOOR_TOKEN_CREATE,
                msgspec.convert({"agent": "claude", **profile}, CreateToken),
                TokenCreated,
            )
            assert (creating.code, creating.message) == (opening.code, opening.message), profile
        unknown = await _refusal(
            client,
            subjects.FRONTDOOR_TOKEN_CREATE,
            CreateToken(agent="claude", workspace=str(workspace), mcp=("notes",)),
            TokenCreated,
        )
        session: SessionInfo = await request(
            client,
            subjects.SESSION_OPEN,
            OpenSession(agent="claude", workspace=str(workspace), mcp=("notes",)),
            SessionInfo,
            timeout_s=30,
        )
    assert (unknown.code, [unknown.message]) == ("not_found", list(session.notices))
    assert unknown.message.startswith("MCP server notes is not offered: there is no MCP server")


def _cli(nats_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bastion.cli", "token", *args, "--nats", nats_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_token_create_takes_agent_runs_options_and_token_list_json_shows_them(
    client: Bus,
    plane_of: Plane,
    door_of: DoorOf,
    workspace: Path,
    tmp_path: Path,
    nats_url: str,
) -> None:
    skills = _skills(tmp_path / "skills")
    shown = owned(tmp_path / "shown")
    run = partial(anyio.to_thread.run_sync)
    async with plane_of(), door_of():
        created = await run(
            partial(
                _cli, nats_url, "create", "--agent", "claude", "--tenant", "acme",
                "--workspace", str(workspace), "--shell", "--network", "declared",
                "--skills-dir", str(skills), "--sandbox-read", str(shown),
                "--sandbox-timeout", "30", "--sandbox-limit", "memory_bytes=256m",
                "--no-ask", "--no-skill-approvals", "--web",
            )
        )  # fmt: skip
        refused = await run(
            partial(_cli, nats_url, "create", "--agent", "claude", "--workspace", str(workspace),
                    "--skills-dir", str(owned(workspace / "skills")))
        )  # fmt: skip
        listed = await run(partial(_cli, nats_url, "list", "--tenant", "acme", "-o", "json"))
    assert created.returncode == 0, created.stderr
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: invalid_input: the skills directory ")
    assert "a command could change a skill unchecked" in refused.stderr
    [info] = json.loads(listed.stdout)["items"]
    limits = info.pop("limits")
    assert {k: v for k, v in limits.items() if v is not None} == {
        "kind": "SessionLimits",
        "wall_s": 30.0,
        "memory_bytes": 256 * 1024**2,
    }
    assert {k: v for k, v in info.items() if k not in ("token_id", "created_at")} == {
        "kind": "frontdoor.token_info",
        "agent": "claude",
        "tenant": "acme",
        "autonomy": "L2",
        "workspace": str(workspace),
        "shell": True,
        "sandbox": "bwrap",
        "network": "declared",
        "read_only_dirs": [str(shown)],
        "skills_dir": str(skills),
        "skill_approvals": False,
        "ask": False,
        "web": True,
        "mcp": [],
    }


def _logging_hooks(state: Path, seen: Path, logger: Path) -> None:
    """Command hooks of every event that append the event they are given to `seen`."""
    logger.write_text(f"#!/bin/sh\ncat >> {seen}/events.jsonl\necho >> {seen}/events.jsonl\n")
    logger.chmod(0o755)
    events = ("run-start", "before-tool", "after-tool", "run-end")
    save_hooks(hooks_path(state), [CommandHook(event=e, command=[str(logger)]) for e in events])


def _told(seen: Path) -> list[dict[str, Any]]:
    text = (seen / "events.jsonl").read_text()
    return [json.loads(line) for line in text.split("\n") if line]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_command_hook_sees_a_front_door_sessions_run_start_calls_and_run_end(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path, mode: str
) -> None:
    """Session-based: the run ends when the client deletes its MCP session. Stateless: the
    token's one session ends when the token is revoked."""
    state = tmp_path / "hooks-state"
    state.mkdir()
    seen = owned(tmp_path / "seen")
    _logging_hooks(state, seen, tmp_path / "log.sh")
    runner = await HookRunner.open(client, state)
    await runner.register()  # registered before the orchestrator starts: it reads it at start
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(runner.serve)
        async with plane_of(), door_of() as url:
            token = await new_token(client, workspace, autonomy="L3", shell=True)
            async with mcp_client(url, token, mode) as mcp:
                ran = await mcp.call_tool("shell", {"command": "echo hooked"})
            before_revoke = [e["event"] for e in _told(seen)]
            [info] = (
                await request(client, subjects.FRONTDOOR_TOKEN_LIST, ListTokens(), TokenList,
                              timeout_s=10)
            ).tokens  # fmt: skip
            await request(
                client,
                subjects.FRONTDOOR_TOKEN_REVOKE,
                RevokeToken(token_id=info.token_id),
                TokenRevoked,
                timeout_s=10,
            )
        tasks.cancel_scope.cancel()
    assert not ran.is_error and "hooked" in text_of(ran)
    told = _told(seen)
    assert [(e["event"], e.get("tool", "")) for e in told] == [
        ("run-start", ""),
        ("before-tool", "shell"),
        ("after-tool", "shell"),
        ("run-end", ""),
    ]
    assert before_revoke == (
        ["run-start", "before-tool", "after-tool", "run-end"]
        if mode == "legacy"
        else ["run-start", "before-tool", "after-tool"]
    )
    assert {e["session"] for e in told} == {told[0]["session"]}
    assert told[0]["agent"] == "claude" and told[-1]["ended"] == "done"


FETCH_PY = """#!/usr/bin/env python3
import sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            print(url, answer.status, answer.read().decode().strip())
    except urllib.error.HTTPError as error:
        print(url, error.code, error.headers.get("X-Bastion-Refused", ""))
    except urllib.error.URLError as error:
        print(url, "unreachable:", error.reason)
"""


def _fetcher_skill(root: Path, host: str) -> Path:
    """A skills directory with `fetcher`, whose `scripts/fetch.py` fetches its arguments and
    prints what each answered, and which declares `host` as the one it may reach."""
    (root / "fetcher" / "scripts").mkdir(parents=True)
    (root / "fetcher" / "SKILL.md").write_text(
        f"---\nname: fetcher\nmetadata:\n  bastion-network: {host}\n---\nFetch pages.\n"
    )
    (root / "fetcher" / "scripts" / "fetch.py").write_text(FETCH_PY)
    return root


@pytest.fixture
def declared_plane(
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    sandbox_state_dir: Path,
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[], AbstractAsyncContextManager[list[str]]]:
    """`async with declared_plane() as off_loopback`: policy, orchestrator, a sandbox bound
    to the egress service's socket, and egress with the operator's range `127.0.0.0/8`
    (`BASTION_EGRESS_ALLOW_RANGES`) and the system's resolver; a connection off loopback
    is refused and listed in `off_loopback`."""
    off_loopback = guard_network(monkeypatch)
    url, sock = bus_settings.nats_url, short_dir / "egress.sock"

    @asynccontextmanager
    async def running() -> AsyncIterator[list[str]]:
        egress = EgressSettings(
            nats_url=url, egress_allow_ranges="127.0.0.0/8", egress_listen=f"unix:{sock}"
        )
        sandbox = SandboxSettings(
            nats_url=url, state_dir=str(sandbox_state_dir), egress_socket=str(sock)
        )
        async with (
            run_service(egress_service(), egress),
            run_service(sandbox_service, sandbox),
            run_service(orchestrator_service, OrchestratorSettings(nats_url=url)),
            run_service(policy_service, PolicySettings),
        ):
            yield off_loopback

    return running


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_tokens_skill_reaches_its_declared_loopback_host_and_nothing_else(
    client: Bus,
    declared_plane: Callable[[], AbstractAsyncContextManager[list[str]]],
    door_of: DoorOf,
    workspace: Path,
    tmp_path: Path,
    mode: str,
) -> None:
    """The must-show, the MCP SDK as the agent: a token whose profile has a skills dir and
    the `declared` network; its skill declares one loopback host:port (reachable because the
    operator allowed 127.0.0.0/8), and the script's `skill_run` reaches it, while an
    undeclared host and another port of the same loopback address are refused by the
    proxy, and the refusal is what the script itself prints."""
    async with (
        web_server() as declared,
        web_server() as other,
        declared_plane() as off,
        door_of() as url,
    ):
        skills = _fetcher_skill(tmp_path / "skills", f"127.0.0.1:{declared.port}")
        token = await new_token(
            client, workspace, autonomy="L5", shell=True, network="declared",
            skills_dir=str(skills), ask=False,
        )  # fmt: skip
        urls = (
            f"http://127.0.0.1:{declared.port}/plain",
            "http://example.com/",
            f"http://127.0.0.1:{other.port}/plain",
        )
        async with mcp_client(url, token, mode) as mcp:
            ran = await mcp.call_tool(
                "skill_run", {"name": "fetcher", "script": "scripts/fetch.py", "args": urls}
            )
    text = text_of(ran)
    assert not ran.is_error, text
    assert text.startswith("exit status 0"), text
    assert (
        f"--- stdout\n{urls[0]} 200 just text\n{urls[1]} 403 not a declared host\n"
        f"{urls[2]} 403 port {other.port} is not declared for 127.0.0.1\n"
    ) in text
    assert text.rstrip().endswith(
        f"connections: 127.0.0.1:{declared.port} allowed; example.com:80 refused: not a "
        f"declared host; 127.0.0.1:{other.port} refused: port {other.port} is not declared "
        "for 127.0.0.1"
    ), text
    assert declared.seen == [("GET /plain HTTP/1.1", f"127.0.0.1:{declared.port}")]
    assert other.seen == [] and off == []


@asynccontextmanager
async def _hook_runner(bus: Bus, state: Path) -> AsyncIterator[None]:
    """The command-hook runner of `state`'s hooks file, registered before the block (so an
    orchestrator started inside reads it at its start) and served until the block ends."""
    runner = await HookRunner.open(bus, state)
    await runner.register()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(runner.serve)
        yield
        tasks.cancel_scope.cancel()


def _script(path: Path, text: str) -> str:
    path.write_text(f"#!/bin/sh\n{text}")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_before_tool_hook_blocks_a_front_door_call_and_an_after_tool_note_is_shown(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path, mode: str
) -> None:
    """What a hook decides reaches the SDK's client as it reaches `agent run`: a blocked
    call is a tool error with the hook's reason, and an after-tool note ends the result."""
    state = owned(tmp_path / "hooks-state")
    guard = 'grep -q "rm " && { echo "deleting is not allowed here" >&2; exit 2; }\nexit 0\n'
    save_hooks(
        hooks_path(state),
        [
            CommandHook(event="before-tool", command=[_script(tmp_path / "g.sh", guard)]),
            CommandHook(event="after-tool", command=[_script(tmp_path / "a.sh", "echo checked\n")]),
        ],
    )
    (workspace / "keep").write_text("k")
    async with _hook_runner(client, state), plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3", shell=True)
        async with mcp_client(url, token, mode) as mcp:
            blocked = await mcp.call_tool("shell", {"command": "rm keep"})
            ran = await mcp.call_tool("shell", {"command": "echo hi"})
    assert blocked.is_error
    assert text_of(blocked) == (
        "hook_blocked: blocked by the before-tool hook commands: deleting is not allowed here"
    )
    assert (workspace / "keep").exists()
    assert not ran.is_error
    assert text_of(ran) == "exit status 0\n--- stdout\nhi\n[hook commands]\nchecked"


async def test_an_mcp_session_left_idle_ends_its_run_before_its_bastion_session_closes(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path
) -> None:
    state = owned(tmp_path / "hooks-state")
    seen = owned(tmp_path / "seen")
    _logging_hooks(state, seen, tmp_path / "log.sh")
    closing = await client.subscribe(subjects.event("session_closed", "default"))
    async with (
        _hook_runner(client, state),
        plane_of(),
        door_of(mcp_session_idle_s=0.5) as url,
    ):
        token = await new_token(client, workspace, autonomy="L3")
        async with mcp_client(url, token, delete_on_exit=False) as mcp:
            await mcp.call_tool("list_files", {})
        # the client left without DELETE: only the idle timer ends the session
        closed = decode((await closing.next_msg(timeout=20)).data, SessionClosed)
    await closing.unsubscribe()
    told = _told(seen)
    assert [e["event"] for e in told] == ["run-start", "before-tool", "after-tool", "run-end"]
    assert {e["session"] for e in told} == {closed.session_id}
    assert told[-1]["ended"] == "done"


async def test_a_stateless_run_is_the_tokens_session_and_a_closed_one_is_followed_by_a_new_run(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path
) -> None:
    """Stateless (2026-07-28) requests of a token act in one Bastion session, so that is
    the run: run-start at its first request, no run-end between requests. When an operator
    closes it, the token's next session is a new run; revoking the token ends that one."""
    state = owned(tmp_path / "hooks-state")
    seen = owned(tmp_path / "seen")
    _logging_hooks(state, seen, tmp_path / "log.sh")
    async with _hook_runner(client, state), plane_of(), door_of() as url:
        token = await new_token(client, workspace, autonomy="L3")
        async with mcp_client(url, token, "auto") as mcp:
            await mcp.call_tool("list_files", {})
            await mcp.call_tool("list_files", {})
            [first] = {e["session"] for e in _told(seen)}
            await request(
                client, subjects.SESSION_CLOSE, SessionRef(session_id=first), SessionInfo,
                timeout_s=10,
            )  # fmt: skip
            gone = await mcp.call_tool("list_files", {})
            again = await mcp.call_tool("list_files", {})
        [token_id] = [
            i.token_id
            for i in (
                await request(client, subjects.FRONTDOOR_TOKEN_LIST, ListTokens(), TokenList,
                              timeout_s=10)
            ).tokens
        ]  # fmt: skip
        await request(
            client, subjects.FRONTDOOR_TOKEN_REVOKE, RevokeToken(token_id=token_id),
            TokenRevoked, timeout_s=10,
        )  # fmt: skip
    assert gone.is_error and "session_closed" in text_of(gone), text_of(gone)
    assert not again.is_error
    told = [(e["event"], e["session"] == first) for e in _told(seen)]
    assert told == [
        ("run-start", True),
        ("before-tool", True),
        ("after-tool", True),
        ("before-tool", True),
        ("after-tool", True),
        ("run-start", False),
        ("before-tool", False),
        ("after-tool", False),
        ("run-end", False),
    ]


async def test_under_network_none_a_tokens_skill_reaches_not_even_its_declared_host(
    client: Bus,
    declared_plane: Callable[[], AbstractAsyncContextManager[list[str]]],
    door_of: DoorOf,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """`--network none` in a token's profile is no network for a skill's script, whatever
    the skill declares: the same script, asked for the same host, reaches nothing, and the
    call is a write (nothing came from outside)."""
    async with web_server() as declared, declared_plane() as off, door_of() as url:
        skills = _fetcher_skill(tmp_path / "skills", f"127.0.0.1:{declared.port}")
        token = await new_token(
            client, workspace, autonomy="L3", shell=True, network="none",
            skills_dir=str(skills), ask=False,
        )  # fmt: skip
        target = f"http://127.0.0.1:{declared.port}/plain"
        async with mcp_client(url, token) as mcp:
            ran = await mcp.call_tool(
                "skill_run", {"name": "fetcher", "script": "scripts/fetch.py", "args": [target]}
            )
            [session] = (await read_json(mcp, "bastion://sessions"))["sessions"]
        info = await session_of(client, session["session_id"])
    text = text_of(ran)
    assert not ran.is_error, text
    assert f"--- stdout\n{target} unreachable: [Errno 111] Connection refused" in text, text
    assert "connections:" not in text
    assert declared.seen == [] and off == []
    assert info.tainted_until is None
