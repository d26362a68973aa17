"""Bounds one caller cannot push past to hurt another: nesting, searches, sessions, CPU, disk.

Each test makes the attack through the bus, as a caller would, and asserts the bound held
with a typed answer that says what to do.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from bastion.cli.natsserver import free_port
from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.sandbox import ExecRequest, ExecResult, FileResult, SearchFiles, WriteFile
from bastion.proto.session import OpenSession, SessionInfo, SessionRef
from bastion.proto.toolinput import SearchFilesInput, WriteFileInput
from bastion.proto.tools import CallResult, ToolCall, ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.sandbox.usage import LEAST_FILE_BYTES, workspace_bytes
from bastion.shared.bus import Client, request
from bastion.shared.codec import MAX_NESTING, decode, encode
from bastion.shared.errors import RemoteError
from bastion.shared.sandboxing.cgroup import cgroup_prefix, find_cgroup_root, tenant_group_name
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner, raw_request
from tests.helpers.front_door import mcp_client, new_token, text_of
from tests.helpers.owners import owned
from tests.helpers.sandbox import in_sandbox_cgroups

SESSION = "0123456789abcdef"

# --- input nested deeper than anything parses ------------------------------------------


def nested(depth: int, kind: str, **fields: object) -> bytes:
    """A message whose last value (a None at the end of the last field given) becomes an
    array nested `depth` deep: built as bytes, since no encoder makes one that deep."""
    shallow = encode({"kind": kind, **fields})
    assert shallow.endswith(b"\xc0")
    return shallow[:-1] + b"\x91" * depth + b"\xc0"


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 10_000])
async def test_input_nested_too_deep_is_a_bad_request_on_each_service(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, depth: int
) -> None:
    cases = [
        (
            orchestrator_service,
            OrchestratorSettings(nats_url=bus_settings.nats_url),
            subjects.session_call("0123456789abcdef"),
            nested(depth, "tool.call", tool="shell", input={"x": None}),
        ),
        (
            mcp_service,
            McpSettings(nats_url=bus_settings.nats_url, http_listen="127.0.0.1:0"),
            subjects.MCP_CALL,
            nested(
                depth,
                "mcp.call",
                tenant="acme",
                session_id="0123456789abcdef",
                call_id="c1",
                server="s",
                arguments={"x": None},
            ),
        ),
    ]
    for setup, settings, subject, payload in cases:
        async with run_service(setup, settings):
            reply = await raw_request(client, subject, payload)
        error = decode(reply.data, ErrorReply)
        assert error.code == codes.BAD_REQUEST, (subject, error)
        assert f"nested more than {MAX_NESTING} deep" in error.message


# --- one tenant's searches holding every search worker -------------------------------------

BACKTRACKS = "(a+)+$"
"""Against a long run of `a` ending in another letter, it backtracks for ever."""


def owned_workspace(root: Path, name: str, files: dict[str, str]) -> Path:
    """A workspace owned by an unprivileged uid, as a sandbox service running as root takes."""
    path = root / name
    path.mkdir()
    for file, text in files.items():
        (path / file).write_text(text)
    return owned(path)


async def in_flight(service: Service, endpoint: str, count: int) -> None:
    """Wait until `count` requests are at work in the endpoint (20 s at most)."""
    for _ in range(2000):
        if service.endpoints[endpoint].in_flight >= count:
            return
        await anyio.sleep(0.01)
    raise AssertionError(f"{count} requests never were at work in {endpoint}")


async def search(client: Client, where: Path, pattern: str, tenant: str) -> str:
    message = SearchFiles(
        session_id=SESSION,
        workspace=str(where),
        tenant=tenant,
        input=SearchFilesInput(pattern=pattern, context=0),
    )
    found = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=30)
    return str(found.text)


async def test_a_tenant_flooding_catastrophic_searches_does_not_hold_another_tenants_search(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url,
        state_dir=str(tmp_path / "state"),
        # Longer than the other tenant's request waits: were it queued behind the flood,
        # its request would time out.
        search_timeout_s=120,
        search_workers_per_tenant=1,
    )
    flooder = owned_workspace(tmp_path, "a", {"bait.txt": "a" * 64 + "!\n"})
    other = owned_workspace(tmp_path, "b", {"notes.txt": "one\ntwo\n"})
    # More searches than anyio's shared pool of workers (one per CPU) holds at once.
    flood = (os.cpu_count() or 2) + 1
    async with (
        run_service(sandbox_service, settings) as service,
        anyio.create_task_group() as flooding,
    ):
        for _ in range(flood):
            flooding.start_soon(search, client, flooder, BACKTRACKS, "acme")
        await in_flight(service, "files", flood)
        assert await search(client, other, "two", "globex") == "notes.txt:2: two"
        flooding.cancel_scope.cancel()


async def test_a_tenants_queue_of_searches_is_bounded_and_a_search_past_it_is_refused_at_once(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url,
        state_dir=str(tmp_path / "state"),
        search_timeout_s=120,
        search_workers_per_tenant=1,
        search_queue_per_tenant=1,
    )
    flooder = owned_workspace(tmp_path, "a", {"bait.txt": "a" * 64 + "!\n"})
    async with (
        run_service(sandbox_service, settings) as service,
        anyio.create_task_group() as flooding,
    ):
        for _ in range(2):  # one runs, one waits in the tenant's queue
            flooding.start_soon(search, client, flooder, BACKTRACKS, "acme")
        await in_flight(service, "files", 2)
        with pytest.raises(RemoteError) as refused:
            await search(client, flooder, BACKTRACKS, "acme")
        flooding.cancel_scope.cancel()
    assert refused.value.code == codes.UNAVAILABLE
    assert "tenant acme has 1 searches running, its cap, and 1 more waiting" in (
        refused.value.message
    )
    assert "BASTION_SEARCH_QUEUE_PER_TENANT" in refused.value.message


async def test_a_sessions_searches_count_against_its_own_tenant_through_the_orchestrator(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    sandbox = SandboxSettings(
        nats_url=bus_settings.nats_url,
        state_dir=str(tmp_path / "state"),
        search_timeout_s=120,
        search_workers_per_tenant=1,
        search_queue_per_tenant=0,
    )
    bait = {"bait.txt": "a" * 64 + "!\n"}
    spaces = [owned_workspace(tmp_path, name, bait) for name in ("a1", "a2", "g1")]

    async def searching(session_id: str, pattern: str) -> CallResult:
        result: CallResult = await request(
            client,
            subjects.session_call(session_id),
            ToolCall(tool="search_files", input={"pattern": pattern, "context": 0}),
            CallResult,
            timeout_s=30,
        )
        return result

    async with (
        run_service(sandbox_service, sandbox) as sandboxes,
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
        run_service(policy_service, PolicySettings),
    ):
        a1, a2, g1 = [
            await request(
                client,
                subjects.SESSION_OPEN,
                OpenSession(agent="searcher", tenant=tenant, workspace=str(space)),
                SessionInfo,
                timeout_s=30,
            )
            for tenant, space in zip(("acme", "acme", "globex"), spaces, strict=True)
        ]
        async with anyio.create_task_group() as flooding:
            flooding.start_soon(searching, a1.session_id, BACKTRACKS)
            await in_flight(sandboxes, "files", 1)
            with pytest.raises(RemoteError) as second:
                await searching(a2.session_id, BACKTRACKS)
            other = await searching(g1.session_id, "!$")
            flooding.cancel_scope.cancel()
    assert second.value.code == codes.UNAVAILABLE
    assert "tenant acme has 1 searches running" in second.value.message
    assert isinstance(other, ToolOutput) and other.text == "bait.txt:1: " + "a" * 64 + "!"


# --- one token opening sessions without end ------------------------------------------------

TOKEN = "00112233445566ff"


async def open_tenant_session(client: Client, tenant: str, token_id: str = "") -> SessionInfo:
    ask = OpenSession(agent="flooder", tenant=tenant, token_id=token_id)
    info: SessionInfo = await request(client, subjects.SESSION_OPEN, ask, SessionInfo, timeout_s=10)
    return info


async def close_session(client: Client, session_id: str) -> None:
    await request(
        client, subjects.SESSION_CLOSE, SessionRef(session_id=session_id), SessionInfo, timeout_s=10
    )


async def test_open_sessions_are_capped_per_token_and_per_tenant_across_replicas(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings
) -> None:
    settings = OrchestratorSettings(
        nats_url=bus_settings.nats_url, max_sessions_per_token=3, max_sessions_per_tenant=5
    )
    # Two replicas in the queue group: each open may land on either.
    async with (
        run_service(orchestrator_service, settings),
        run_service(orchestrator_service, settings),
    ):
        opened = [await open_tenant_session(client, "acme", TOKEN) for _ in range(3)]
        assert {s.token_id for s in opened} == {TOKEN}
        for _ in range(4):  # whichever replica answers, the token is at its cap
            with pytest.raises(RemoteError) as token_refused:
                await open_tenant_session(client, "acme", TOKEN)
            assert token_refused.value.code == codes.QUOTA_EXCEEDED
        assert f"token {TOKEN} has 3 sessions open" in token_refused.value.message
        assert "BASTION_MAX_SESSIONS_PER_TOKEN" in token_refused.value.message
        # The tenant has room for two more sessions not opened with the token, then none.
        await open_tenant_session(client, "acme")
        await open_tenant_session(client, "acme")
        with pytest.raises(RemoteError) as tenant_refused:
            await open_tenant_session(client, "acme")
        assert tenant_refused.value.code == codes.QUOTA_EXCEEDED
        assert "tenant acme has 5 sessions open" in tenant_refused.value.message
        assert "BASTION_MAX_SESSIONS_PER_TENANT" in tenant_refused.value.message
        assert "close sessions" in tenant_refused.value.message
        # Another tenant is not held back, and closing a session frees its place.
        await open_tenant_session(client, "globex", TOKEN.replace("f", "e"))
        await close_session(client, opened[0].session_id)
        await open_tenant_session(client, "acme", TOKEN)


async def test_a_token_opening_mcp_sessions_through_the_front_door_meets_its_cap(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    work = owned_workspace(tmp_path, "work", {"a.txt": "a\n"})
    tokens_file = tmp_path / "http-tokens"
    tokens_file.write_text("operator:op-token-0123456789abcdef\n")
    tokens_file.chmod(0o600)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with (
        run_service(
            sandbox_service,
            SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state")),
        ),
        run_service(
            orchestrator_service,
            OrchestratorSettings(nats_url=bus_settings.nats_url, max_sessions_per_token=1),
        ),
        run_service(policy_service, PolicySettings),
        run_service(
            mcp_service,
            McpSettings(
                nats_url=bus_settings.nats_url,
                http_listen=f"127.0.0.1:{port}",
                http_tokens_file=str(tokens_file),
            ),
        ),
    ):
        token = await new_token(client, work, autonomy="L3")
        async with mcp_client(url, token) as first:
            listed = await first.call_tool("list_files", {"path": "."})
            async with mcp_client(url, token) as second:
                with pytest.raises(MCPError) as refused:
                    await second.call_tool("list_files", {"path": "."})
        # The first MCP session ended (DELETE closed its Bastion session): room again.
        async with mcp_client(url, token) as third:
            again = await third.call_tool("list_files", {"path": "."})
    assert text_of(listed) == "a.txt"
    assert "sessions open, its cap (BASTION_MAX_SESSIONS_PER_TOKEN)" in str(refused.value)
    assert text_of(again) == "a.txt"


# --- one tenant's busy commands crowding out another's on the CPU --------------------------

HELD = "i=0; while [ ! -e go ] && [ $i -lt 2000 ]; do i=$((i+1)); sleep 0.01; done"
"""Runs until the test touches `go` in its workspace (or 20 s pass); it writes nothing, so it
runs whichever host uid the sandbox's user is."""


def cpu_groups() -> set[str]:
    """The groups this service made in the `cpu` hierarchy that its sandboxes' processes
    are in."""
    found = set()
    for pid in in_sandbox_cgroups():
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue  # it ended meanwhile
        for line in lines:
            _, controllers, path = line.split(":", 2)
            unified = CPU_ROOT is not None and CPU_ROOT.version == 2
            cpu = (controllers == "") if unified else ("cpu" in controllers.split(","))
            # A launcher joins its pids and memory groups first: until it has joined its
            # cpu group too, its cpu line is another group, which is not a command's.
            if cpu and cgroup_prefix() in path:
                found.add(path)
    return found


async def until_groups(count: int) -> set[str]:
    """The sandboxes' cpu groups once there are `count` (20 s at most)."""
    for _ in range(2000):
        groups = cpu_groups()
        if len(groups) >= count:
            return groups
        await anyio.sleep(0.01)
    raise AssertionError(f"the sandboxes' processes never were in {count} cpu groups")


async def run_held(client: Client, where: Path, tenant: str) -> ExecResult:
    message = ExecRequest(session_id=SESSION, workspace=str(where), command=HELD, tenant=tenant)
    result: ExecResult = await request(
        client, subjects.SANDBOX_EXEC, message, ExecResult, timeout_s=30
    )
    return result


CPU_ROOT = find_cgroup_root()


@pytest.mark.skipif(
    CPU_ROOT is None or CPU_ROOT.cpu is None,
    reason="this host gives the service no cgroup with the cpu controller",
)
async def test_each_tenants_commands_run_in_its_own_cpu_group_of_the_configured_weight(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    assert CPU_ROOT is not None and CPU_ROOT.cpu is not None
    (tmp_path / "state").mkdir()
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"), cpu_weight=300
    )
    setting, weight = ("cpu.weight", "300") if CPU_ROOT.version == 2 else ("cpu.shares", "3072")
    spaces = [owned_workspace(tmp_path, f"w{n}", {}) for n in range(3)]
    tenants = ["acme", "acme", "globex"]
    async with run_service(sandbox_service, settings), anyio.create_task_group() as group:
        for space, tenant in zip(spaces, tenants, strict=True):
            group.start_soon(run_held, client, space, tenant)
        groups = await until_groups(3)
        made = {
            tenant: (CPU_ROOT.cpu / tenant_group_name(tenant) / setting).read_text().strip()
            for tenant in ("acme", "globex")
        }
        for space in spaces:
            (space / "go").touch()
    parents = {group.rsplit("/", 1)[0].rsplit("/", 1)[-1] for group in groups}
    assert parents == {tenant_group_name("acme"), tenant_group_name("globex")}
    assert len(groups) == 3  # each command has a group of its own, inside its tenant's
    assert made == {"acme": weight, "globex": weight}
    # Once their last command ended, the tenants' groups are gone.
    assert not (CPU_ROOT.cpu / tenant_group_name("acme")).exists()
    assert not (CPU_ROOT.cpu / tenant_group_name("globex")).exists()


# --- one session filling the disk -----------------------------------------------------------

MiB = 1024 * 1024


async def exec_in(client: Client, where: Path, command: str) -> ExecResult:
    message = ExecRequest(session_id=SESSION, workspace=str(where), command=command)
    result: ExecResult = await request(
        client, subjects.SANDBOX_EXEC, message, ExecResult, timeout_s=60
    )
    return result


async def test_a_workspace_cannot_grow_past_its_bound_and_deleting_makes_room_again(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path
) -> None:
    (tmp_path / "state").mkdir()
    settings = SandboxSettings(
        nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "state"), workspace_max_bytes=MiB
    )
    work = owned_workspace(tmp_path, "work", {})
    work.chmod(0o777)  # writable by the sandbox whichever host uid it runs as
    async with run_service(sandbox_service, settings):
        # One command cannot write past the room left: its file stops there.
        filled = await exec_in(client, work, "head -c 3000000 /dev/zero > big")
        assert filled.limit_hit == "file_size"
        assert (work / "big").stat().st_size <= MiB
        # Once at the bound, no command can grow a file, and it is told why.
        (work / "pad").write_bytes(b"x" * MiB)
        stuck = await exec_in(client, work, "head -c 3000000 /dev/zero > more")
        assert "BASTION_WORKSPACE_MAX_BYTES" in stuck.stderr
        assert "delete files it no longer needs" in stuck.stderr
        assert stuck.limit_hit == "file_size"
        assert (work / "more").stat().st_size <= LEAST_FILE_BYTES
        with pytest.raises(RemoteError) as refused:
            await request(
                client,
                subjects.SANDBOX_FILES,
                WriteFile(
                    session_id=SESSION,
                    workspace=str(work),
                    input=WriteFileInput(path="w.txt", content="hi"),
                ),
                FileResult,
                timeout_s=10,
            )
        # Deleting is a command too, and frees the room.
        freed = await exec_in(client, work, "rm big pad more")
        wrote = await request(
            client,
            subjects.SANDBOX_FILES,
            WriteFile(
                session_id=SESSION,
                workspace=str(work),
                input=WriteFileInput(path="w.txt", content="hi"),
            ),
            FileResult,
            timeout_s=10,
        )
    assert refused.value.code == codes.QUOTA_EXCEEDED
    assert "at or over its bound of 1048576 (BASTION_WORKSPACE_MAX_BYTES)" in refused.value.message
    assert freed.exit_status == 0  # it ran while the workspace was full
    assert wrote.text == "wrote 2 bytes to w.txt"


def test_the_measure_follows_no_link_and_counts_a_hard_linked_file_once(tmp_path: Path) -> None:
    work = owned_workspace(tmp_path, "work", {"a.bin": ""})
    (work / "a.bin").write_bytes(os.urandom(256 * 1024))
    os.link(work / "a.bin", work / "b.bin")
    (work / "root").symlink_to("/")
    (work / ".git").mkdir()
    (work / ".git" / "pack").write_bytes(os.urandom(128 * 1024))
    measured = workspace_bytes(work)
    assert 384 * 1024 <= measured < 512 * 1024
    # More directories side by side than the process may have descriptors open: a walk
    # holds one per level, not one per directory, so they are all measured.
    wide = len(os.listdir("/proc/self/fd")) + 256
    for n in range(wide):
        (work / "wide" / str(n)).mkdir(parents=True)
        (work / "wide" / str(n) / "f").write_bytes(b"x")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wide, hard))
    try:
        measured_wide = workspace_bytes(work)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert measured_wide > measured + wide * 512


async def test_a_count_left_stale_by_a_dead_orchestrator_does_not_hold_a_place_for_ever(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings
) -> None:
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url, max_sessions_per_tenant=2)
    async with run_service(orchestrator_service, settings):
        closed = await open_tenant_session(client, "acme")
        await close_session(client, closed.session_id)
        # As an orchestrator killed between its steps would leave it: one session closed
        # but still counted, one counted long ago and never stored.
        kv = await client.jetstream().key_value(subjects.SESSIONS_BUCKET)
        stale = {closed.session_id: 0.0, "ffffffffffffffff": 0.0}
        await kv.put(f"open.tenant.{b'acme'.hex()}", encode({"sessions": stale}))
        first = await open_tenant_session(client, "acme")
        second = await open_tenant_session(client, "acme")
        with pytest.raises(RemoteError) as refused:
            await open_tenant_session(client, "acme")
    assert first.state == second.state == "open"
    assert refused.value.code == codes.QUOTA_EXCEEDED
