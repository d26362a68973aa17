"""The suite's shared fixtures: a real NATS server per test, a client on it, services run in
this process, a workspace, the plane of services a session's calls go through, and the
Docker engine with the test image. Each fixture name has one meaning across the suite; the
list is in CONTRIBUTING.md ("The tests"). Helpers that are not fixtures: `tests/helpers/`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

import anyio
import docker
import msgspec
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from bastion.cli.natsserver import free_port, running_nats_server
from bastion.egress.service import egress_service
from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, connect
from bastion.shared.sandboxing import SandboxFailed
from bastion.shared.sandboxing.docker import LABEL_OWNER
from bastion.shared.sandboxing.docker_engine import DockerEngine
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings
from tests.helpers.bus import Plane, ServiceRunner
from tests.helpers.docker import ensure_image
from tests.helpers.egress import RESOLVER, Egress, egress_settings, guard_network
from tests.helpers.front_door import DoorOf
from tests.helpers.owners import owned
from tests.helpers.tracing import Spans


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
    """`async with run_service(setup, settings)`: serve a service in this process until exit.

    `settings` may be a settings type instead: its defaults, on this test's bus.
    """

    @asynccontextmanager
    async def runner(setup: Any, settings: Any = None) -> AsyncIterator[Service]:
        if isinstance(settings, type):
            settings = settings(**msgspec.structs.asdict(bus_settings))
        settings = settings if settings is not None else bus_settings
        async with (
            connect(settings, "test-service") as nc,
            setup(nc, settings) as service,
            anyio.create_task_group(),
            service.running(nc, drain_timeout_s=5.0),
        ):
            yield service

    return runner


# A workspace and the plane of services a session's calls go through.


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A fresh, empty workspace, `tmp_path/workspace`, owned by uid 1000
    (`tests.helpers.owners.owned`): a sandbox runs as its workspace's owner."""
    return owned(tmp_path / "workspace")


@pytest.fixture
def sandbox_state_dir(tmp_path: Path) -> Path:
    """The state dir of the `plane` and `plane_of` sandbox service (a module whose checks
    need it elsewhere overrides this fixture, and only this one)."""
    return tmp_path / "sandbox-state"


@pytest.fixture
async def plane(
    run_service: ServiceRunner, bus_settings: BusSettings, sandbox_state_dir: Path
) -> AsyncIterator[None]:
    """Policy and sandbox running on the test's NATS for the whole test; the test starts (and
    restarts) its orchestrators itself: `async with orchestrator(run_service, bus_settings)`
    (`tests.helpers.session`)."""
    settings = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(sandbox_state_dir))
    async with run_service(policy_service, PolicySettings), run_service(sandbox_service, settings):
        yield


@pytest.fixture
def plane_of(
    run_service: ServiceRunner, bus_settings: BusSettings, sandbox_state_dir: Path
) -> Plane:
    """`async with plane_of(taint_s=600.0, policy=True)`: sandbox, orchestrator and (with
    `policy`) policy on the test's NATS, each a fresh instance every time it is entered."""

    @asynccontextmanager
    async def running(taint_s: float = 600.0, policy: bool = True) -> AsyncIterator[None]:
        sandbox = SandboxSettings(nats_url=bus_settings.nats_url, state_dir=str(sandbox_state_dir))
        orchestrator = OrchestratorSettings(nats_url=bus_settings.nats_url, taint_s=taint_s)
        async with (
            run_service(sandbox_service, sandbox),
            run_service(orchestrator_service, orchestrator),
        ):
            if policy:
                async with run_service(policy_service, PolicySettings):
                    yield
            else:
                yield

    return running


@pytest.fixture
def door_of(run_service: ServiceRunner, bus_settings: BusSettings, tmp_path: Path) -> DoorOf:
    """`async with door_of(**mcp_settings) as url`: an mcp service with its front door on a free
    loopback port (operator token `op-token-0123456789abcdef`); yields its base URL."""
    tokens_file = tmp_path / "http-tokens"
    tokens_file.write_text("operator:op-token-0123456789abcdef\n")
    tokens_file.chmod(0o600)

    @asynccontextmanager
    async def running(**settings: Any) -> AsyncIterator[str]:
        port = free_port()
        mcp = McpSettings(
            nats_url=bus_settings.nats_url,
            http_listen=f"127.0.0.1:{port}",
            http_tokens_file=str(tokens_file),
            **settings,
        )
        async with run_service(mcp_service, mcp):
            yield f"http://127.0.0.1:{port}"

    return running


@pytest.fixture
async def egress_loopback_allowed(
    client: Client, run_service: ServiceRunner, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Egress]:
    """The egress service with `BASTION_EGRESS_ALLOW_RANGES=127.0.0.0/8`, for this test only,
    and the test resolver; no connection may leave loopback."""
    off_loopback = guard_network(monkeypatch)
    async with run_service(egress_service(RESOLVER), egress_settings(nats_url, "127.0.0.0/8")):
        yield Egress(client, off_loopback)
    assert off_loopback == []


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a Unix socket's path is at most 107 bytes."""
    made = Path(tempfile.mkdtemp(prefix="bx", dir="/tmp"))
    made.chmod(0o711)  # searchable by the sandbox's host user, which connects to the socket
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def spans() -> Iterator[Spans]:
    """A tracer provider exporting to memory, installed globally for one test, then undone.

    OpenTelemetry lets a process set its provider once; a test resets that guard and puts
    the previous provider back so other tests see the process as it was.
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)
    try:
        yield Spans(exporter)
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


# Docker: without an engine these skip and say why; with one, the test image is built first
# when it is missing or stale, and a failed build is an error.


@pytest.fixture(scope="session")
def engine() -> Iterator[Any]:
    """A Docker SDK client of the engine that answers (skips the test when none does)."""
    # Asked first through the backend's own engine, which probes the socket itself: the
    # SDK leaves a socket open when no engine answers, and that would fail the whole run
    # on an unraisable ResourceWarning.
    try:
        DockerEngine().ping()
    except SandboxFailed as error:
        pytest.skip(f"no Docker engine answers: {error.message}")
    client = docker.from_env(timeout=30)
    yield client
    client.close()


@pytest.fixture(scope="session")
def image_id(engine: Any, request: pytest.FixtureRequest) -> str:
    """The test image's ID (`tests.helpers.docker.IMAGE`), built once per run, its progress
    shown on the terminal, when the engine has none or one of an older recipe."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    shown = capture.global_and_fixture_disabled() if capture else nullcontext()
    with shown:
        try:
            return ensure_image(engine)
        except RuntimeError as error:
            pytest.fail(str(error), pytrace=False)


@pytest.fixture
def backend_name(image_id: str) -> str:
    """The pinned backend string of the test image: its name and its image ID."""
    return f"docker:bastion-sandbox-test@{image_id}"


@pytest.fixture
def owner(engine: Any) -> Iterator[str]:
    """An owner label of this test's own, its containers removed afterwards."""
    name = f"test-{secrets.token_hex(6)}"
    yield name
    for container in engine.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={name}"}):
        container.remove(force=True)
