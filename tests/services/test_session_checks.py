"""Checks before a session starts, made through the orchestrator's session.open: each refusal
says what was wrong and what to give instead, and no session is opened."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from bastion.orchestrator.execute import format_exec_result
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.sandbox import ExecResult
from bastion.proto.session import OpenSession, SessionInfo
from bastion.proto.tools import ToolCall, ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner
from tests.helpers.owners import owned


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    made = {
        "state": tmp_path / "home" / "state",
        "work": tmp_path / "work",
        "skills": tmp_path / "work" / "skills",
        "apart": tmp_path / "skills",
        "docs": tmp_path / "docs",
    }
    for path in made.values():
        path.mkdir(parents=True)
    (made["docs"] / "guide.txt").write_text("read me\n")
    owned(made["work"])
    return made


def sandbox_settings(bus_settings: BusSettings, dirs: dict[str, Path]) -> SandboxSettings:
    return SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(dirs["state"]))


@pytest.fixture
def sandbox_state_dir(dirs: dict[str, Path]) -> Path:
    return dirs["state"]


@pytest.fixture
async def plane_and_orchestrator(
    plane: None, run_service: ServiceRunner, bus_settings: BusSettings
) -> AsyncIterator[None]:
    """`plane` (the sandbox's state in `dirs["state"]`) and an orchestrator."""
    settings = OrchestratorSettings(nats_url=bus_settings.nats_url)
    async with run_service(orchestrator_service, settings):
        yield


async def open_shell_session(client: Client, **fields: object) -> SessionInfo:
    """Open a session with `shell` offered unless `fields` say otherwise."""
    ask = msgspec.convert({"agent": "tester", "shell": True, **fields}, OpenSession)
    info: SessionInfo = await request(client, subjects.SESSION_OPEN, ask, SessionInfo, timeout_s=30)
    return info


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"network": "sion-egress"}, "bubblewrap takes the network mode none, declared or host"),
        ({"workspace": "{state}"}, "is Bastion's state directory"),
        ({"workspace": "{state}/.."}, "contains Bastion's state directory"),
        ({"workspace": "{state}/sessions"}, "lies inside Bastion's state directory"),
        ({"skills_dir": "{skills}"}, "give a skills directory apart from the workspace"),
        ({"skills_dir": "{work}"}, "give a skills directory apart from the workspace"),
        ({"skills_dir": "{apart}/missing"}, "is not a directory: give one that exists"),
        ({"skills_dir": "{state}"}, "overlaps Bastion's state directory"),
        ({"read_only_dirs": ["{state}/.."]}, "would show Bastion's state directory"),
        ({"read_only_dirs": ["{state}"]}, "neither is, contains, nor lies inside it"),
        ({"read_only_dirs": ["{state}/sessions"]}, "would show Bastion's state directory"),
        ({"read_only_dirs": ["/proc"]}, "give a directory elsewhere"),
    ],
)
async def test_a_session_whose_directories_or_network_do_not_fit_is_refused_before_it_starts(
    client: Client,
    plane_and_orchestrator: None,
    dirs: dict[str, Path],
    fields: dict[str, object],
    words: str,
) -> None:
    (dirs["state"] / "sessions").mkdir()
    text = msgspec.json.encode(fields).decode()
    for name, path in dirs.items():
        text = text.replace("{" + name + "}", str(path))
    given = msgspec.json.decode(text)
    with pytest.raises(RemoteError) as raised:
        await open_shell_session(client, **{"workspace": str(dirs["work"]), **given})
    assert raised.value.code == codes.INVALID_INPUT
    assert words in raised.value.message


async def test_a_sandbox_that_fails_a_trivial_command_stops_the_session_saying_what_to_do(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    dirs: dict[str, Path],
) -> None:
    broken = msgspec.structs.replace(sandbox_settings(bus_settings, dirs), bwrap="/bin/false")
    async with (
        run_service(policy_service, PolicySettings),
        run_service(sandbox_service, broken),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=bus_settings.nats_url)),
    ):
        with pytest.raises(RemoteError) as raised:
            await open_shell_session(client, workspace=str(dirs["work"]))
    assert raised.value.code == codes.SANDBOX_FAILED
    assert "did not start" in raised.value.message
    assert "check that bubblewrap runs" in raised.value.message


async def test_extra_read_only_dirs_and_a_skills_dir_apart_are_carried_to_every_command(
    client: Client, plane_and_orchestrator: None, dirs: dict[str, Path]
) -> None:
    session = await open_shell_session(
        client,
        workspace=str(dirs["work"]),
        autonomy="L3",
        read_only_dirs=[str(dirs["docs"])],
        skills_dir=str(dirs["apart"]),
    )
    assert session.read_only_dirs == (str(dirs["docs"]),)
    assert session.skills_dir == str(dirs["apart"])
    result = await request(
        client,
        subjects.session_call(session.session_id),
        ToolCall(tool="shell", input={"command": f"cat {dirs['docs']}/guide.txt"}),
        ToolOutput,
        timeout_s=30,
    )
    assert result.text == "exit status 0\n--- stdout\nread me"


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        ({"limit_hit": "oom"}, "limit: its memory limit ran out and the kernel killed a process"),
        ({"limit_hit": "process_limit"}, "limit: it reached its limit on processes"),
        ({"limit_hit": "file_size"}, "limit: it wrote a file past the per-file size limit"),
        ({"stdout_cut": 10}, "stdout was cut: 10 bytes in the middle were left out"),
    ],
)
def test_the_model_is_told_which_limit_a_command_hit_and_that_output_was_cut(
    fields: dict[str, object], line: str
) -> None:
    result = msgspec.convert(
        {"exit_status": 137, "ended": "signal", "signal": 9, **fields}, ExecResult
    )
    text = format_exec_result(result)
    assert text.splitlines()[0] == "killed by SIGKILL (exit status 137)"
    assert line in text


def test_the_connection_line_of_a_declared_network_call_comes_last() -> None:
    line = "connections: pypi.org:443 allowed; example.com:443 refused: not a declared host"
    result = ExecResult(exit_status=0, ended="exited", stdout="ok\n", connections=line)
    assert format_exec_result(result).splitlines()[-1] == line
    assert "connections" not in format_exec_result(ExecResult(exit_status=0, ended="exited"))
