"""The sandbox service runs commands and file tools in the workspace, through the bus."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlparse

import msgspec
import pytest

from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.sandbox import (
    ExecRequest,
    ExecResult,
    FileResult,
    Limits,
    ReadFile,
    SandboxCheck,
    SandboxReady,
    SandboxRelease,
    SandboxReleased,
    WriteFile,
)
from bastion.proto.toolinput import ReadFileInput, WriteFileInput
from bastion.sandbox.service import output_cap, sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.codec import decode
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner, raw_request
from tests.helpers.owners import owned
from tests.helpers.sleepers import sleeping, unique_duration

SESSION = "0123456789abcdef"
MiB = 1024 * 1024


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file beside the workspace that no tool may reach."""
    path = tmp_path / "outside.txt"
    path.write_text("secret\n")
    return path


@pytest.fixture
def settings(bus_settings: BusSettings, state_dir: Path) -> SandboxSettings:
    return SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(state_dir))


@pytest.fixture
async def sandbox(run_service: ServiceRunner, settings: SandboxSettings) -> AsyncIterator[None]:
    async with run_service(sandbox_service, settings):
        yield


async def shell(client: Client, workspace: Path, command: str, **fields: object) -> ExecResult:
    message = ExecRequest(session_id=SESSION, workspace=str(workspace), command=command, **fields)  # type: ignore[arg-type]
    result: ExecResult = await request(
        client, subjects.SANDBOX_EXEC, message, ExecResult, timeout_s=30
    )
    return result


async def read(client: Client, workspace: Path, path: str, **fields: int) -> str:
    message = ReadFile(
        session_id=SESSION, workspace=str(workspace), input=ReadFileInput(path=path, **fields)
    )
    result = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
    return str(result.text)


async def write(client: Client, workspace: Path, path: str, content: str) -> str:
    message = WriteFile(
        session_id=SESSION,
        workspace=str(workspace),
        input=WriteFileInput(path=path, content=content),
    )
    result = await request(client, subjects.SANDBOX_FILES, message, FileResult, timeout_s=10)
    return str(result.text)


def assert_untouched(outside: Path) -> None:
    assert outside.read_text() == "secret\n"


# --- the shell -------------------------------------------------------------------------


async def test_a_command_runs_as_uid_10001_named_sandbox(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(client, workspace, "id")
    assert result.stdout == "uid=10001(sandbox) gid=10001(sandbox) groups=10001(sandbox)\n"
    assert (result.ended, result.exit_status) == ("exited", 0)


async def test_the_shell_has_its_home_in_the_workspace_and_no_root_and_a_read_only_system(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(
        client, workspace, "echo $HOME; ls /root; touch /usr/local/x; touch made; pwd"
    )
    assert result.stdout == "/workspace\n/workspace\n"
    assert "cannot access '/root': No such file or directory" in result.stderr
    assert "cannot touch '/usr/local/x': Read-only file system" in result.stderr
    assert (workspace / "made").exists()


async def test_the_shell_reaches_neither_the_internet_nor_nats_on_loopback(
    client: Client, sandbox: None, workspace: Path, bus_settings: BusSettings
) -> None:
    port = urlparse(bus_settings.nats_url).port
    result = await shell(
        client,
        workspace,
        f"bash -c 'cat < /dev/tcp/127.0.0.1/{port}' && echo reached-nats; "
        "python3 -c \"import urllib.request; urllib.request.urlopen('https://example.com', "
        'timeout=5)" || echo no-internet',
    )
    assert "reached-nats" not in result.stdout
    assert "Connection refused" in result.stderr
    assert "no-internet" in result.stdout


async def test_the_environment_holds_no_bastion_or_nats_variables(
    client: Client,
    run_service: ServiceRunner,
    settings: SandboxSettings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BASTION_NATS_PASSWORD", "hunter2")
    monkeypatch.setenv("NATS_URL", settings.nats_url)
    async with run_service(sandbox_service, settings):
        result = await shell(client, workspace, "env")
    assert "BASTION" not in result.stdout
    assert "NATS" not in result.stdout
    assert "hunter2" not in result.stdout


async def test_a_file_in_tmp_lasts_for_the_session_and_is_gone_once_it_closes(
    client: Client, sandbox: None, workspace: Path
) -> None:
    # /tmp is the session's warm sandbox's, kept between its commands as in a shell
    await shell(client, workspace, "echo x > /tmp/left-behind")
    result = await shell(client, workspace, "ls -A /tmp")
    assert result.stdout == "left-behind\n"
    other = ExecRequest(session_id="f" * 16, workspace=str(workspace), command="ls -A /tmp")
    elsewhere = await request(client, subjects.SANDBOX_EXEC, other, ExecResult, timeout_s=30)
    assert elsewhere.stdout == ""  # another session's sandbox has a /tmp of its own
    await request(
        client,
        subjects.SANDBOX_RELEASE,
        SandboxRelease(session_id=SESSION),
        SandboxReleased,
        timeout_s=10,
    )
    result = await shell(client, workspace, "ls -A /tmp")
    assert result.stdout == ""  # the session closed: its sandbox and /tmp went with it


async def test_the_wall_clock_ends_the_command_and_kills_its_children(
    client: Client, sandbox: None, workspace: Path
) -> None:
    duration = unique_duration()
    result = await shell(
        client, workspace, f"sleep {duration} & sleep {duration}", limits=Limits(wall_s=0.5)
    )
    assert result.ended == "timeout"
    assert sleeping(duration) == []


async def test_ten_mebibytes_of_output_come_back_cut_to_the_cap_with_a_marker(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(
        client,
        workspace,
        "head -c 10485760 /dev/zero | tr '\\0' a; echo done >&2",
        limits=Limits(output_bytes=64 * 1024),
    )
    assert result.stdout_cut == 10 * MiB - 64 * 1024
    assert f"\n[... {result.stdout_cut} bytes cut ...]\n" in result.stdout
    assert (result.stderr, result.stderr_cut) == ("done\n", 0)


async def test_output_too_big_for_one_bus_message_is_cut_to_fit_whatever_the_limit(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(
        client,
        workspace,
        "head -c 3000000 /dev/urandom; head -c 3000000 /dev/urandom >&2",
        limits=Limits(output_bytes=8 * MiB),
    )
    kept = output_cap(client.max_payload)
    assert result.stdout_cut == result.stderr_cut == 3000000 - kept


async def test_a_command_that_exits_non_zero_is_a_result(
    client: Client, sandbox: None, workspace: Path
) -> None:
    result = await shell(client, workspace, "ls no-such-file")
    assert (result.ended, result.exit_status) == ("exited", 2)
    assert "no-such-file" in result.stderr


async def test_a_file_written_by_the_tool_is_read_by_the_shell_and_back(
    client: Client, sandbox: None, workspace: Path
) -> None:
    await write(
        client,
        workspace,
        "primes.py",
        "print(sum(1 for n in range(2, 60) if all(n % d for d in range(2, n))))\n",
    )
    result = await shell(client, workspace, "python3 primes.py > count.txt")
    assert result.exit_status == 0
    assert await read(client, workspace, "count.txt") == "     1\t17"


@pytest.mark.parametrize(
    ("backend", "network", "code", "words"),
    [
        ("docker:alpine:3.20", "none", codes.INVALID_INPUT, "alpine:3.20 is not pinned"),
        ("docker:alpine@sha256:" + "0" * 64, "bridge", codes.INVALID_INPUT, "`bridge`"),
        ("bwrap", "bridge", codes.INVALID_INPUT, "none, declared or host"),
    ],
)
async def test_backends_and_networks_not_run_are_answered_with_a_typed_error(
    client: Client,
    sandbox: None,
    workspace: Path,
    backend: str,
    network: str,
    code: str,
    words: str,
) -> None:
    with pytest.raises(RemoteError) as raised:
        await shell(client, workspace, "true", backend=backend, network=network)
    assert raised.value.code == code
    assert words in raised.value.message


# --- the check -------------------------------------------------------------------------


async def test_the_check_runs_true_and_says_the_sandbox_is_ready(
    client: Client, sandbox: None, workspace: Path
) -> None:
    ready = await request(
        client,
        subjects.SANDBOX_CHECK,
        SandboxCheck(workspace=str(workspace)),
        SandboxReady,
        timeout_s=30,
    )
    assert ready.backend == "bwrap"
    assert "bubblewrap" in ready.detail


async def test_a_sandbox_that_cannot_start_fails_the_check_saying_what_to_do(
    client: Client, run_service: ServiceRunner, settings: SandboxSettings, workspace: Path
) -> None:
    broken = msgspec.structs.replace(settings, bwrap="false")
    async with run_service(sandbox_service, broken):
        with pytest.raises(RemoteError) as raised:
            await request(
                client,
                subjects.SANDBOX_CHECK,
                SandboxCheck(workspace=str(workspace)),
                SandboxReady,
                timeout_s=30,
            )
    assert raised.value.code == codes.SANDBOX_FAILED
    assert "user namespaces" in raised.value.message


# --- the file tools --------------------------------------------------------------------


async def test_write_creates_directories_and_says_how_many_bytes(
    client: Client, sandbox: None, workspace: Path
) -> None:
    assert await write(client, workspace, "src/pkg/a.txt", "héllo\n") == (
        "wrote 7 bytes to src/pkg/a.txt"
    )
    assert (workspace / "src/pkg/a.txt").read_text() == "héllo\n"
    assert sorted(os.listdir(workspace / "src/pkg")) == ["a.txt"]  # no temporary left


async def test_read_numbers_lines_from_offset_and_says_where_to_read_on(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "ten.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    text = await read(client, workspace, "/workspace/ten.txt", offset=3, limit=2)
    assert text == ("     3\tline 3\n     4\tline 4\n... 6 more lines: read on with offset=5")


async def test_a_long_line_is_cut_and_an_offset_past_the_end_is_refused(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "long.txt").write_text("x" * 5000 + "\nshort\n")
    text = await read(client, workspace, "long.txt")
    first, second = text.splitlines()
    assert first.endswith("[... line cut at 2000 characters]")
    assert second == "     2\tshort"
    with pytest.raises(RemoteError) as raised:
        await read(client, workspace, "long.txt", offset=9)
    assert raised.value.code == codes.INVALID_INPUT
    assert "has 2 lines" in raised.value.message


async def test_a_binary_file_is_refused_and_a_missing_one_is_not_found(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    with pytest.raises(RemoteError) as binary:
        await read(client, workspace, "blob.bin")
    assert binary.value.code == codes.INVALID_INPUT
    assert "binary" in binary.value.message
    with pytest.raises(RemoteError) as missing:
        await read(client, workspace, "nope.txt")
    assert missing.value.code == codes.NOT_FOUND


async def test_a_directory_read_as_a_file_is_refused_saying_so(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "src").mkdir()
    for path in ("src", "src/.."):
        with pytest.raises(RemoteError) as raised:
            await read(client, workspace, path)
        assert raised.value.code == codes.INVALID_INPUT
        assert "is a directory, not a file" in raised.value.message


async def test_a_symlink_inside_the_workspace_is_followed(
    client: Client, sandbox: None, workspace: Path
) -> None:
    (workspace / "real").mkdir()
    (workspace / "real/notes.txt").write_text("kept\n")
    (workspace / "current").symlink_to("real")
    (workspace / "absolute").symlink_to("/workspace/real/notes.txt")
    assert await read(client, workspace, "current/notes.txt") == "     1\tkept"
    assert await read(client, workspace, "absolute") == "     1\tkept"


@pytest.mark.parametrize("tool", ["read", "write"])
async def test_a_symlink_out_of_the_workspace_is_refused(
    client: Client, sandbox: None, workspace: Path, outside: Path, tool: str
) -> None:
    (workspace / "leak.txt").symlink_to(outside)
    (workspace / "up").symlink_to("..")
    for path in ("leak.txt", "up/outside.txt"):
        with pytest.raises(RemoteError) as raised:
            if tool == "read":
                await read(client, workspace, path)
            else:
                await write(client, workspace, path, "overwritten\n")
        assert raised.value.code == codes.INVALID_INPUT
        assert "outside the workspace" in raised.value.message
    assert_untouched(outside)


@pytest.mark.parametrize("path", ["../outside.txt", "a/../../outside.txt", "/etc/passwd"])
async def test_a_path_that_leaves_the_workspace_is_refused(
    client: Client, sandbox: None, workspace: Path, outside: Path, path: str
) -> None:
    (workspace / "a").mkdir()
    for attempt in (read(client, workspace, path), write(client, workspace, path, "x")):
        with pytest.raises(RemoteError) as raised:
            await attempt
        assert raised.value.code == codes.INVALID_INPUT
        assert "outside the workspace" in raised.value.message
    assert_untouched(outside)


async def test_a_write_through_a_hard_link_to_a_file_outside_is_refused(
    client: Client, sandbox: None, workspace: Path, outside: Path
) -> None:
    os.link(outside, workspace / "linked.txt")
    with pytest.raises(RemoteError) as raised:
        await write(client, workspace, "linked.txt", "overwritten\n")
    assert raised.value.code == codes.INVALID_INPUT
    assert "hard links" in raised.value.message
    assert_untouched(outside)


# --- the workspace and the payload -----------------------------------------------------


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ("inside", "lies inside Bastion's state directory"),
        ("containing", "contains Bastion's state directory"),
        ("same", "is Bastion's state directory"),
        ("relative", "not an absolute path"),
        ("missing", "does not exist"),
        ("file", "not a directory"),
    ],
)
async def test_a_workspace_that_overlaps_the_state_dir_or_is_no_directory_is_refused(
    client: Client, sandbox: None, tmp_path: Path, state_dir: Path, where: str, words: str
) -> None:
    (state_dir / "sessions").mkdir()
    (tmp_path / "file").write_text("")
    workspace = {
        "inside": str(state_dir / "sessions"),
        "containing": str(tmp_path),
        "same": str(state_dir),
        "relative": "workspace",
        "missing": str(tmp_path / "missing"),
        "file": str(tmp_path / "file"),
    }[where]
    attempts = [
        request(
            client,
            subjects.SANDBOX_EXEC,
            ExecRequest(session_id=SESSION, workspace=workspace, command="true"),
            ExecResult,
            timeout_s=10,
        ),
        request(
            client,
            subjects.SANDBOX_FILES,
            ReadFile(session_id=SESSION, workspace=workspace, input=ReadFileInput(path="x")),
            FileResult,
            timeout_s=10,
        ),
        request(
            client,
            subjects.SANDBOX_CHECK,
            SandboxCheck(workspace=workspace),
            SandboxReady,
            timeout_s=10,
        ),
    ]
    for attempt in attempts:
        with pytest.raises(RemoteError) as raised:
            await attempt
        assert raised.value.code == codes.INVALID_INPUT
        assert words in raised.value.message


async def test_a_workspace_path_re_pointed_between_calls_is_checked_again(
    client: Client, sandbox: None, tmp_path: Path, state_dir: Path
) -> None:
    first, second = owned(tmp_path / "first"), owned(tmp_path / "second")
    for workspace in (first, second):
        (workspace / "which.txt").write_text(f"{workspace.name}\n")
        os.chown(workspace / "which.txt", 1000, 1000)
    (state_dir / "which.txt").write_text("the state dir\n")
    link = tmp_path / "current"
    link.symlink_to(first)
    assert "first" in await read(client, link, "which.txt")
    assert "first" in (await shell(client, link, "cat which.txt")).stdout
    # The check the service kept for this path holds only while the path leads there.
    link.unlink()
    link.symlink_to(state_dir)
    for attempt in (read(client, link, "which.txt"), shell(client, link, "cat which.txt")):
        with pytest.raises(RemoteError) as raised:
            await attempt
        assert raised.value.code == codes.INVALID_INPUT
        assert "is Bastion's state directory" in raised.value.message
    link.unlink()
    link.symlink_to(second)
    assert "second" in await read(client, link, "which.txt")
    assert "second" in (await shell(client, link, "cat which.txt")).stdout
    # The directory itself replaced by another at the same path: checked again too.
    assert "first" in await read(client, first, "which.txt")
    first.rename(tmp_path / "first-moved")
    owned(first)
    (first / "which.txt").write_text("replaced\n")
    os.chown(first / "which.txt", 1000, 1000)
    assert "first" in await read(client, tmp_path / "first-moved", "which.txt")
    assert "replaced" in await read(client, first, "which.txt")


@pytest.mark.parametrize(
    "subject", [subjects.SANDBOX_EXEC, subjects.SANDBOX_FILES, subjects.SANDBOX_CHECK]
)
async def test_a_payload_of_the_wrong_shape_gets_bad_request(
    client: Client, sandbox: None, subject: str
) -> None:
    reply = await raw_request(client, subject, msgspec.msgpack.encode({"kind": "nonsense"}))
    error = decode(reply.data, ErrorReply)
    assert error.code == codes.BAD_REQUEST
