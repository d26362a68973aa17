"""The container probe: a service beats a file while it serves; the probe reads its age."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio

from bastion.shared.bus import Client
from bastion.shared.probe import STALE_AFTER_S, check
from tests.helpers.runtime import read_all, service_env, wait_until_pinged


def probe(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bastion.shared.probe"],
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
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    assert not beat.exists()
    stopped = probe(env)
    assert stopped.returncode == 1 and "is missing" in stopped.stderr


def test_a_stale_beat_or_no_variable_is_unhealthy_with_a_reason(tmp_path: Path) -> None:
    beat = tmp_path / "alive"
    beat.touch()
    env = {"BASTION_PROBE_FILE": str(beat)}
    assert check(env) is None
    stale = check(env, now=time.time() + STALE_AFTER_S + 5)
    assert stale is not None and "stopped beating" in stale
    unset = check({})
    assert unset is not None and "BASTION_PROBE_FILE" in unset
