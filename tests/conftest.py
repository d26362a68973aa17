"""Fixtures: a real NATS server per test, a client on it, and services run in-process."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from bastion.shared.bus import Client, connect
from bastion.shared.natsserver import running_nats_server
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings

ServiceRunner = Callable[..., AbstractAsyncContextManager[Service]]


def pytest_configure(config: pytest.Config) -> None:
    """As root, a base temporary directory of this run's own (not pytest's shared
    `/tmp/pytest-of-root`, which each run resets to 0700): a root sandbox service runs a
    command as its workspace's owner (`tests.helpers.owners`), who must be able to reach it."""
    if os.geteuid() == 0 and config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="bastion-tests-", dir="/tmp")


def pytest_unconfigure(config: pytest.Config) -> None:
    basetemp = config.option.basetemp
    if os.geteuid() == 0 and basetemp and Path(basetemp).name.startswith("bastion-tests-"):
        shutil.rmtree(basetemp, ignore_errors=True)


async def raw_request(client: Client, subject: str, payload: bytes, timeout_s: float = 10) -> Msg:
    """A request of raw bytes, as a client in another language would send it.

    It flushes first and asks once more on "no responders": right after a service
    subscribes, the server can still answer a fresh connection's first request that way
    (the typed `bastion.shared.bus.request` works around the same race).
    """
    await client.flush()
    try:
        return await client.request(subject, payload, timeout=timeout_s)
    except NoRespondersError:
        await client.flush()
        return await client.request(subject, payload, timeout=timeout_s)


@pytest.fixture(autouse=True)
def own_state_dir(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Every test has a state dir of its own: nothing reads or writes the real one
    (`~/.local/state/bastion`, where a user's own policies or a running Bastion live).

    As root, `tmp_path` and the run's base temporary directory above it are made searchable
    (not readable) by every user: a sandbox runs as its workspace's unprivileged owner
    (`tests.helpers.owners`), who must be able to reach a workspace made under `tmp_path`."""
    state_dir = tmp_path / "default-state"
    monkeypatch.setenv("BASTION_STATE_DIR", str(state_dir))
    if os.geteuid() == 0:
        base = tmp_path_factory.getbasetemp()
        for each in (tmp_path, *tmp_path.parents):
            mode = each.stat().st_mode
            if not mode & 0o001:
                each.chmod((mode & 0o7777) | 0o001)
            if each == base:
                break
    return state_dir


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # nats-py runs on asyncio only


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    with running_nats_server(tmp_path / "nats") as url:
        yield url


@pytest.fixture
def bus_settings(nats_url: str) -> BusSettings:
    return BusSettings(nats_url=nats_url, request_timeout_s=10.0)


@pytest.fixture
async def client(bus_settings: BusSettings) -> AsyncIterator[Client]:
    async with connect(bus_settings, "test-client") as nc:
        yield nc


@pytest.fixture
def run_service(bus_settings: BusSettings) -> ServiceRunner:
    """`async with run_service(setup, settings)`: serve a service in this process until exit."""

    @asynccontextmanager
    async def runner(setup: Any, settings: Any = None) -> AsyncIterator[Service]:
        settings = settings if settings is not None else bus_settings
        async with (
            connect(settings, "test-service") as nc,
            setup(nc, settings) as service,
            anyio.create_task_group(),
            service.running(nc, drain_timeout_s=5.0),
        ):
            yield service

    return runner
