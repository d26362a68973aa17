"""The container probe: a service beats a file while it runs, saying whether it is on the bus;
`live` reads its age, `ready` its age and what it says."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from bastion.shared import probe as probing
from bastion.shared.bus import Client, connect
from bastion.shared.probe import NOT_READY, READY, STALE_AFTER_S, check, heartbeat
from bastion.shared.settings import BusSettings
from tests.helpers.runtime import read_all, service_env, wait_until_pinged


def probe(env: dict[str, str], *which: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bastion.shared.probe", *which],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


async def test_a_serving_service_passes_the_probe_and_fails_it_once_stopped(
    client: Client, nats_url: str, tmp_path: Path
) -> None:
    beat = tmp_path / "alive"
    env = service_env(nats_url, BASTION_PROBE_FILE=str(beat))
    with anyio.fail_after(30):
        async with (
            await anyio.open_process([sys.executable, "-m", "bastion.policy"], env=env) as process,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(read_all, process)
            await wait_until_pinged(client, "policy", process)
            # Another process writes the file: there is no event to wait on, so poll.
            while not beat.exists():  # noqa: ASYNC110
                await anyio.sleep(0.05)
            assert (await anyio.to_thread.run_sync(probe, env)).returncode == 0
            assert (await anyio.to_thread.run_sync(probe, env, "live")).returncode == 0
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    assert not beat.exists()
    stopped = probe(env)
    assert stopped.returncode == 1 and "is missing" in stopped.stderr


def test_a_stale_beat_or_no_variable_is_unhealthy_with_a_reason(tmp_path: Path) -> None:
    beat = tmp_path / "alive"
    beat.write_text(f"{READY}\n")
    env = {"BASTION_PROBE_FILE": str(beat)}
    assert check(env) is None
    for ready in (True, False):
        stale = check(env, now=time.time() + STALE_AFTER_S + 5, ready=ready)
        assert stale is not None and "stopped beating" in stale
    unset = check({})
    assert unset is not None and "BASTION_PROBE_FILE" in unset


async def test_off_the_bus_the_service_is_alive_but_not_ready(
    bus_settings: BusSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probing, "BEAT_S", 0.05)  # the beat's period, not what it says
    beat = tmp_path / "alive"
    env = {"BASTION_PROBE_FILE": str(beat)}
    with anyio.fail_after(30):
        async with connect(bus_settings, "probed") as client, heartbeat(str(beat), client):
            while not beat.exists() or beat.read_text() != f"{READY}\n":  # noqa: ASYNC110
                await anyio.sleep(0.01)
            assert check(env) is None and check(env, ready=False) is None
            await client.close()
            while beat.read_text() != f"{NOT_READY}\n":  # noqa: ASYNC110
                await anyio.sleep(0.01)
            alive, ready = probe(env, "live"), probe(env, "ready")
    assert alive.returncode == 0, alive.stderr
    assert ready.returncode == 1 and "not connected to NATS" in ready.stderr
    assert not beat.exists()


def test_a_probe_asked_for_something_else_says_how_to_call_it(tmp_path: Path) -> None:
    beat = tmp_path / "alive"
    beat.write_text(f"{READY}\n")
    asked = probe({"BASTION_PROBE_FILE": str(beat)}, "healthy")
    assert asked.returncode == 2 and "[live|ready]" in asked.stderr
