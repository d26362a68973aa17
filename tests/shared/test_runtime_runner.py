"""A service process: ready when discoverable, SIGTERM drains and exits 0, logs are JSON lines."""

from __future__ import annotations

import json
import signal
import sys

import anyio

from bastion.cli.natsserver import free_port
from bastion.shared.bus import Client
from tests.helpers.runtime import read_all, service_env, wait_until_pinged


async def test_a_service_process_answers_ping_then_drains_and_exits_0_on_sigterm(
    client: Client, nats_url: str
) -> None:
    command = [sys.executable, "-m", "bastion.policy"]
    stderr: list[bytes] = []
    with anyio.fail_after(30):
        async with (
            await anyio.open_process(command, env=service_env(nats_url)) as process,
            anyio.create_task_group() as tasks,
        ):

            async def collect() -> None:
                stderr.append(await read_all(process))

            tasks.start_soon(collect)
            ping = await wait_until_pinged(client, "policy", process)
            assert ping["name"] == "policy"
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
    lines = stderr[0].decode().splitlines()
    assert lines, "the service logged nothing"
    records = [json.loads(line) for line in lines]
    for record in records:
        assert {"level", "service", "message", "time"} <= set(record)
        assert record["service"] == "policy"
    messages = [r["message"] for r in records]
    assert "service ready" in messages
    assert messages[-1] == "service stopped"
    assert any(r.get("signal") == "SIGTERM" for r in records)


async def test_a_bad_setting_exits_2_with_a_sentence_naming_the_variable() -> None:
    env = service_env("nats://127.0.0.1:1", BASTION_REQUEST_TIMEOUT_S="abc")
    with anyio.fail_after(30):
        result = await anyio.run_process(
            [sys.executable, "-m", "bastion.policy"], env=env, check=False
        )
    assert result.returncode == 2
    text = result.stderr.decode()
    assert "BASTION_REQUEST_TIMEOUT_S is not valid" in text
    assert "Traceback" not in text
    assert text.count("\n") == 1


async def test_a_log_level_that_is_not_one_exits_2_naming_bastion_log_level() -> None:
    env = service_env("nats://127.0.0.1:1", BASTION_LOG_LEVEL="loud")
    with anyio.fail_after(30):
        result = await anyio.run_process(
            [sys.executable, "-m", "bastion.policy"], env=env, check=False
        )
    assert result.returncode == 2
    text = result.stderr.decode()
    assert "BASTION_LOG_LEVEL is not valid" in text and "Traceback" not in text


async def test_bastion_log_level_warning_keeps_a_services_info_lines_out(
    client: Client, nats_url: str
) -> None:
    env = service_env(nats_url, BASTION_LOG_LEVEL="warning")
    with anyio.fail_after(30):
        async with await anyio.open_process(
            [sys.executable, "-m", "bastion.policy"], env=env
        ) as process:
            await wait_until_pinged(client, "policy", process)
            process.send_signal(signal.SIGTERM)
            text = (await read_all(process)).decode()
            assert await process.wait() == 0
    levels = {json.loads(line)["level"] for line in text.splitlines()}
    assert levels <= {"warning", "error", "critical"}, text


async def test_an_unreachable_bus_exits_1_with_a_json_line_saying_how_to_start_one() -> None:
    env = service_env(f"nats://127.0.0.1:{free_port()}")
    with anyio.fail_after(30):
        result = await anyio.run_process(
            [sys.executable, "-m", "bastion.policy"], env=env, check=False
        )
    assert result.returncode == 1
    text = result.stderr.decode()
    assert "Traceback" not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert records[-1]["level"] == "error"
    assert "bastion up" in records[-1]["message"]
