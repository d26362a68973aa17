"""Attacks from a `run_code` program: seeing the workspace, the service or the host, reaching
a network, calling tools that write or reach out, speaking the pipe protocol falsely (another
session, another parent, garbage, a line without end), a fork bomb and calls past the most.
Each runs against real NATS, policy, orchestrator and bubblewrap."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.mcp import McpServerSpec
from bastion.proto.tools import NestedCall, NestedResult, ToolOutput
from bastion.sandbox.runcode import MAX_CALLS, MAX_REQUEST_BYTES
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.mcp_gateway import add as add_server
from tests.helpers.mcp_gateway import mcp_plane
from tests.helpers.mcp_upstream import NOTES, PYTHON_DIRS, sandboxed_python
from tests.helpers.owners import owned
from tests.helpers.sandbox import CANARY
from tests.helpers.session import call, open_session, orchestrator

RAW = """
import json, os, sys
requests, answers = int(sys.argv[1]), int(sys.argv[2])
replies = os.fdopen(answers, "rb", buffering=0)

def line():
    got = b""
    while not got.endswith(b"\\n"):
        got += replies.read(1)
    return json.loads(got)

def send(data):
    while data:
        data = data[os.write(requests, data):]
    return line()
"""
"""A program's own side of the pipes, bypassing `tools`: `send(bytes)` → the answer."""


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    """A host file beside the workspace that no program may read."""
    path = tmp_path / "outside.txt"
    path.write_text(CANARY)
    yield path
    assert path.read_text() == CANARY


async def run_code(client: Client, workspace: Path, code: str, **session: object) -> object:
    owned(workspace)
    opened = await open_session(
        client, workspace=str(workspace), shell=True, autonomy="L3", **session
    )
    return await call(client, opened.session_id, "run_code", code=code)


def printed(result: object) -> list[str]:
    assert isinstance(result, ToolOutput), result
    return result.text.splitlines()


async def test_a_program_sees_no_workspace_no_service_and_nothing_of_the_host_beyond_system_dirs(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    canary: Path,
) -> None:
    (workspace / "private.txt").write_text("workspace words\n")
    targets = [
        str(workspace / "private.txt"),
        "/workspace/private.txt",
        str(canary),
        f"/proc/{os.getpid()}/environ",
        "/etc/shadow",
        "/root/.bashrc",
        str(Path.home() / ".bashrc"),
    ]
    code = (
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path).read()\n"
        "        print('read', path)\n"
        "    except OSError as error:\n"
        "        print('refused', path, type(error).__name__)\n"
        "import os\n"
        "print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "print('uid', os.getuid(), 'cwd', os.getcwd())\n"
        "print('top', sorted(os.listdir('/')))\n"
    )
    async with orchestrator(run_service, bus_settings):
        lines = printed(await run_code(client, workspace, code))
    assert not [line for line in lines if line.startswith("read ")], lines
    assert len([line for line in lines if line.startswith("refused ")]) == len(targets)
    pids = json.loads(lines[-3].removeprefix("pids "))
    assert os.getpid() not in pids and len(pids) <= 3  # its own namespace: pid 1 and itself
    assert lines[-2] == "uid 10001 cwd /tmp"
    assert "workspace" not in lines[-1]


async def test_a_program_reaches_no_network_not_even_the_hosts_loopback(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            f"for host, port in [('127.0.0.1', {port}), ('1.1.1.1', 53), ('8.8.8.8', 443)]:\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=3).close()\n"
            "        print('reached', host)\n"
            "    except OSError as error:\n"
            "        print('refused', host, type(error).__name__)\n"
        )
        async with orchestrator(run_service, bus_settings):
            lines = printed(await run_code(client, workspace, code))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert [line.split()[:2] for line in lines] == [
        ["refused", "127.0.0.1"],
        ["refused", "1.1.1.1"],
        ["refused", "8.8.8.8"],
    ]


async def test_a_program_may_not_call_tools_that_write_run_or_reach_out(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    calls = {
        "fetch_url": {"url": "https://example.com/"},
        "shell": {"command": "touch /workspace/ran"},
        "write_file": {"path": "wrote", "content": "x"},
        "edit_file": {"path": "a", "old_string": "a", "new_string": "b"},
        "run_code": {"code": "print(1)"},
        "skill_read": {"name": "x"},
        "notes_add": {},
    }
    code = (
        f"for name, given in {calls!r}.items():\n"
        "    try:\n"
        "        call(name, **given)\n"
        "        print('made', name)\n"
        "    except ToolError as error:\n"
        "        print(name, error.code, error.message)\n"
    )
    async with orchestrator(run_service, bus_settings):
        lines = printed(await run_code(client, workspace, code, web=True))
    assert len(lines) == len(calls) and not [line for line in lines if line.startswith("made")]
    for line, name in zip(lines, calls, strict=True):
        if name in ("skill_read", "notes_add"):  # not offered to this session at all
            assert line.startswith(f"{name} {codes.UNKNOWN_TOOL} "), line
        else:
            want = f"run_code calls only tools that read; make the {name} call yourself"
            assert line == f"{name} {codes.DENIED} {want}"
    assert not (workspace / "ran").exists() and not (workspace / "wrote").exists()


async def test_the_pipe_protocol_names_no_session_and_no_parent_and_bounds_each_line(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    code = RAW + (
        "forged = {'id': 1, 'tool': 'read_file', 'input': {'path': 'a.txt'},\n"
        "          'session_id': 'fedcba9876543210', 'parent_call_id': 'other'}\n"
        "print(send(json.dumps(forged).encode() + b'\\n')['error']['code'])\n"
        "print(send(b'garbage\\n')['error']['code'])\n"
        "print(send(b'[1, 2]\\n')['error']['code'])\n"
        f"print(send(b'x' * {MAX_REQUEST_BYTES + 10}) ['error']['code'])\n"
        "os.write(requests, b'still the long line\\n')\n"
        "good = {'id': 2, 'tool': 'read_file', 'input': {'path': 'a.txt'}}\n"
        "print('text' in send(json.dumps(good).encode() + b'\\n'))\n"
    )
    async with orchestrator(run_service, bus_settings):
        lines = printed(await run_code(client, workspace, code))
    assert lines == [
        codes.BAD_REQUEST,
        codes.BAD_REQUEST,
        codes.BAD_REQUEST,
        codes.INVALID_INPUT,
        "True",
    ]


async def test_a_nested_call_of_a_parent_that_is_not_running_is_refused(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    owned(workspace)
    async with orchestrator(run_service, bus_settings):
        opened = await open_session(client, workspace=str(workspace), shell=True, autonomy="L3")
        done = await call(client, opened.session_id, "run_code", code="print(1)")
        assert isinstance(done, ToolOutput)
        for parent in ("made-up", done.call_id):
            with pytest.raises(RemoteError) as refused:
                await request(
                    client,
                    subjects.session_nested(opened.session_id),
                    NestedCall(parent_call_id=parent, tool="read_file", input={"path": "a.txt"}),
                    NestedResult,
                    timeout_s=10,
                )
            assert refused.value.code == codes.INVALID_INPUT
            assert "has no run_code call" in refused.value.message


async def test_a_fork_bomb_ends_within_the_sandboxs_limits_and_the_next_program_runs(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    async with orchestrator(run_service, bus_settings):
        owned(workspace)
        opened = await open_session(
            client,
            workspace=str(workspace),
            shell=True,
            autonomy="L3",
            limits={"wall_s": 5.0, "processes": 32},
        )
        bombed = await call(client, opened.session_id, "run_code", code=bomb)
        after = await call(client, opened.session_id, "run_code", code="print('after')")
    assert isinstance(bombed, ErrorReply) and bombed.code == codes.PROGRAM_FAILED, bombed
    assert isinstance(after, ToolOutput) and after.text == "after\n"


async def test_raw_calls_past_the_most_are_refused_each_one(
    client: Client,
    plane: None,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    code = RAW + (
        "codes = []\n"
        f"for n in range({MAX_CALLS + 5}):\n"
        "    one = {'id': n, 'tool': 'read_file', 'input': {'path': 'a.txt'}}\n"
        "    answer = send(json.dumps(one).encode() + b'\\n')\n"
        "    codes.append(answer['error']['code'] if 'error' in answer else 'ok')\n"
        "print(codes.count('ok'), sorted(set(codes[-5:])))\n"
    )
    async with orchestrator(run_service, bus_settings):
        lines = printed(await run_code(client, workspace, code))
    assert lines == [f"{MAX_CALLS} ['{codes.QUOTA_EXCEEDED}']"]


async def test_a_program_calls_an_upstream_tool_only_when_it_reads_and_is_not_open_world(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    notes = owned(tmp_path / "notes")
    spec = McpServerSpec(
        transport="stdio",
        command=sandboxed_python(NOTES),
        directory=str(notes),
        read_only_dirs=(*PYTHON_DIRS, str(NOTES.parent)),
    )
    sandbox = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(tmp_path / "sandbox"))
    code = (
        "for name, given in [('notes_list_notes', {}), ('notes_add_note', {'name': 'n', "
        "'text': 't'}), ('notes_read_resource', {'uri': 'note://n'})]:\n"
        "    try:\n"
        "        call(name, **given)\n"
        "        print(name, 'made')\n"
        "    except ToolError as error:\n"
        "        print(name, error.code, error.message)\n"
    )
    async with (
        run_service(sandbox_service, sandbox),
        mcp_plane(run_service, bus_settings, tmp_path / "mcp"),
    ):
        await add_server(client, "notes", spec)
        result = await run_code(client, workspace, code, mcp=["notes"])
    assert printed(result) == [
        "notes_list_notes made",
        f"notes_add_note {codes.DENIED} run_code calls only tools that read; make the "
        "notes_add_note call yourself",
        f"notes_read_resource {codes.DENIED} run_code calls only tools that read; make the "
        "notes_read_resource call yourself",
    ]
    assert not (notes / "n.note").exists()
