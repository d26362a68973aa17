"""The `declared` network: real egress + sandbox services and NATS, in this process.

The egress service allows 127.0.0.0/8 as an operator range for these tests only, the test
starts an HTTP server on loopback, and the test resolver maps `pypi.test` and
`other.test` to 127.0.0.1. A command reaches its declared hosts only through the bridge
the proxy variables name; nothing else leaves its sandbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import anyio
import pytest

from bastion.egress.resolver import FixedResolver
from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.sandbox import ExecRequest, ExecResult
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, request
from bastion.shared.errors import RemoteError
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import basic, guard_network, web_server
from tests.helpers.owners import owned
from tests.helpers.tracing import Spans, span_ancestry

SESSION = "0123456789abcdef"
RESOLVER = FixedResolver({"pypi.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})

FETCH = """\
import sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            print(answer.status, answer.read().decode().strip())
    except urllib.error.HTTPError as error:
        print(error.code, error.headers.get("X-Bastion-Refused", ""))
"""

CONNECT = """\
import socket, sys
family, address = (socket.AF_UNIX, sys.argv[1]) if "/" in sys.argv[1] else (
    socket.AF_INET, ("127.0.0.1", int(sys.argv[1])))
try:
    socket.socket(family).connect(address)
    print("connected")
except OSError as error:
    print("refused", type(error).__name__)
"""


@dataclass
class Declared:
    client: Client
    workspace: Path
    socket: Path
    nats_port: int

    async def run(self, command: str, *hosts: str, network: str = "declared") -> ExecResult:
        result: ExecResult = await request(
            self.client,
            subjects.SANDBOX_EXEC,
            ExecRequest(
                session_id=SESSION,
                workspace=str(self.workspace),
                command=command,
                network=network,
                tenant="acme",
                call_id="call-1",
                declared_hosts=hosts,
            ),
            ExecResult,
            timeout_s=60,
        )
        return result


@pytest.fixture
async def declared(
    client: Client,
    run_service: ServiceRunner,
    nats_url: str,
    tmp_path: Path,
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Declared]:
    """Egress on a Unix socket (loopback allowed for this test), and a sandbox bound to it."""
    off_loopback = guard_network(monkeypatch)
    sock = short_dir / "egress.sock"
    workspace = owned(tmp_path / "workspace")
    (workspace / "fetch.py").write_text(FETCH)
    (workspace / "connect.py").write_text(CONNECT)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    egress = EgressSettings(
        nats_url=nats_url, egress_allow_ranges="127.0.0.0/8", egress_listen=f"unix:{sock}"
    )
    sandbox = SandboxSettings(nats_url=nats_url, state_dir=str(state_dir), egress_socket=str(sock))
    async with (
        run_service(egress_service(RESOLVER), egress),
        run_service(sandbox_service, sandbox),
    ):
        yield Declared(client, workspace, sock, int(urlparse(nats_url).port or 0))
    assert off_loopback == []


async def test_a_command_reaches_its_declared_host_through_the_proxy_variables(
    declared: Declared,
) -> None:
    async with web_server() as server:
        result = await declared.run(
            f"python3 fetch.py http://pypi.test:{server.port}/plain", f"pypi.test:{server.port}"
        )
    assert result.exit_status == 0, result.stderr
    assert result.stdout == "200 just text\n"
    assert server.seen == [("GET /plain HTTP/1.1", f"pypi.test:{server.port}")]
    assert result.connections == f"connections: pypi.test:{server.port} allowed"


async def test_the_egress_grant_and_its_close_are_spans_under_the_sandbox_exec(
    declared: Declared,
    spans: Spans,
) -> None:
    with anyio.fail_after(60):
        result = await declared.run("true", "pypi.test:80")
        await spans.wait_for(f"process {subjects.EGRESS_CONNECTIONS}")
    assert result.exit_status == 0, result.stderr
    finished = spans.finished()
    [grant] = [s for s in finished if s.name == f"process {subjects.EGRESS_GRANT}"]
    [closed] = [s for s in finished if s.name == f"process {subjects.EGRESS_CONNECTIONS}"]
    for span, subject in ((grant, subjects.EGRESS_GRANT), (closed, subjects.EGRESS_CONNECTIONS)):
        assert span_ancestry(finished, span)[:3] == [
            f"send {subject}",
            "sandbox.run",
            f"process {subjects.SANDBOX_EXEC}",
        ]
    assert grant.attributes is not None and grant.attributes["bastion.tenant"] == "acme"


async def test_an_undeclared_host_is_refused_with_403_and_both_lines_are_in_connections(
    declared: Declared,
) -> None:
    async with web_server() as server:
        result = await declared.run(
            f"python3 fetch.py http://pypi.test:{server.port}/plain "
            f"http://other.test:{server.port}/plain",
            f"pypi.test:{server.port}",
        )
    assert result.stdout == "200 just text\n403 not a declared host\n", result.stderr
    assert len(server.seen) == 1
    assert result.connections == (
        f"connections: pypi.test:{server.port} allowed; "
        f"other.test:{server.port} refused: not a declared host"
    )


async def test_a_program_ignoring_the_proxy_variables_reaches_nothing(
    declared: Declared,
) -> None:
    async with web_server() as server:
        result = await declared.run(
            f"python3 connect.py {server.port}; python3 connect.py {declared.socket}; "
            f"python3 connect.py {declared.nats_port}",
            f"pypi.test:{server.port}",
        )
    assert result.stdout == (
        "refused ConnectionRefusedError\nrefused FileNotFoundError\n"
        "refused ConnectionRefusedError\n"
    ), result.stderr
    assert server.seen == []
    assert result.connections == "connections: none"


async def test_the_command_cannot_reach_nats_even_through_the_proxy(declared: Declared) -> None:
    result = await declared.run(
        f"python3 fetch.py http://127.0.0.1:{declared.nats_port}/", "pypi.test"
    )
    assert result.stdout.startswith("403 "), result.stderr
    assert "allowed" not in result.connections


async def test_the_grant_ends_with_the_call(declared: Declared) -> None:
    result = await declared.run("printenv HTTP_PROXY", "pypi.test")
    url = urlparse(result.stdout.strip())
    assert (url.hostname, url.port) == ("127.0.0.1", 3128)
    assert url.username and url.password
    stream = await anyio.connect_unix(declared.socket)
    async with stream:
        auth = basic(url.username, url.password)
        await stream.send(
            f"CONNECT pypi.test:443 HTTP/1.1\r\nProxy-Authorization: {auth}\r\n\r\n".encode()
        )
        with anyio.fail_after(10):
            answer = await stream.receive()
    assert answer.startswith(b"HTTP/1.1 407 "), answer
    assert b"unknown or has expired" in answer


async def test_declared_without_hosts_is_no_network_at_all(declared: Declared) -> None:
    result = await declared.run(
        "printenv HTTP_PROXY || echo no proxy; python3 connect.py 3128; "
        f"python3 connect.py {declared.nats_port}"
    )
    assert result.stdout == (
        "no proxy\nrefused ConnectionRefusedError\nrefused ConnectionRefusedError\n"
    ), result.stderr
    assert result.connections == ""


async def test_without_an_egress_socket_declared_hosts_are_refused_saying_why(
    client: Client, run_service: ServiceRunner, nats_url: str, tmp_path: Path
) -> None:
    settings = SandboxSettings(nats_url=nats_url, state_dir=str(tmp_path / "state"))
    owned(tmp_path / "workspace")
    async with run_service(sandbox_service, settings):
        with pytest.raises(RemoteError) as raised:
            await request(
                client,
                subjects.SANDBOX_EXEC,
                ExecRequest(
                    session_id=SESSION,
                    workspace=str(tmp_path / "workspace"),
                    command="true",
                    network="declared",
                    declared_hosts=("pypi.test",),
                ),
                ExecResult,
                timeout_s=30,
            )
    assert raised.value.code == codes.INVALID_INPUT
    assert "BASTION_EGRESS_SOCKET" in raised.value.message
