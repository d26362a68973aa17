"""The reference's `pypi-version` skill transcript, replayed through the whole plane.

Orchestrator, policy, sandbox, egress and vault run in this process on a real NATS. The
skill is the one in `examples/skills/pypi-version`, pointed at a loopback server over
plain http: the test resolver maps `pypi.test` and `example.test` to 127.0.0.1, and the
egress service allows 127.0.0.0/8 as an operator range for this test only. The metadata
address stays refused, and the token's value never reaches the result.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from bastion.egress.resolver import FixedResolver
from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto.tools import ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import guard_network
from tests.helpers.owners import owned
from tests.helpers.session import call, open_session
from tests.helpers.vault import add, key_file, vault_settings

RESOLVER = FixedResolver({"pypi.test": ["127.0.0.1"], "example.test": ["127.0.0.1"]})
TOKEN = "pypi-AgEIcHlwaS5vcmcCJGExYjJjM2Q0LWU1ZjYtNzg5MC1hYmNkLWVmMDEyMzQ1Njc4OQ"

EXAMPLE = Path(__file__).parents[2] / "examples" / "skills" / "pypi-version"


@asynccontextmanager
async def pypi_server() -> AsyncIterator[tuple[int, list[str]]]:
    """A loopback server answering `/pypi/requests/json`, and 404 to anything else."""
    seen: list[str] = []
    body = json.dumps({"info": {"version": "2.34.2"}}).encode()

    async def handle(stream: SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                try:
                    data += await stream.receive()
                except anyio.EndOfStream:
                    return
            line = data.split(b"\r\n", 1)[0].decode("latin-1")
            seen.append(line)
            found = line.split(" ")[1] == "/pypi/requests/json"
            status, payload = ("200 OK", body) if found else ("404 Not Found", b"not found")
            head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            await stream.send(head.encode() + payload)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        yield port, seen
        group.cancel_scope.cancel()


def write_skill(root: Path, port: int) -> Path:
    """The example skill, its hosts swapped for the loopback server's (plain http)."""
    skill = root / "pypi-version"
    (skill / "scripts").mkdir(parents=True)
    host = f"pypi.test:{port}"
    front = (EXAMPLE / "SKILL.md").read_text()
    assert "bastion-network: pypi.org\n" in front
    (skill / "SKILL.md").write_text(
        front.replace("bastion-network: pypi.org", f"bastion-network: {host}")
    )
    text = (EXAMPLE / "scripts" / "latest.py").read_text()
    swaps = {
        "https://pypi.org/": f"http://{host}/",
        "https://example.com/": f"http://example.test:{port}/",
    }
    for old, new in swaps.items():
        assert old in text, old
        text = text.replace(old, new)
    script = skill / "scripts" / "latest.py"
    script.write_text(text)
    script.chmod(0o755)
    return root


async def test_the_reference_pypi_version_transcript_replays_through_the_plane(
    client: Client,
    run_service: ServiceRunner,
    nats_url: str,
    tmp_path: Path,
    short_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    off_loopback = guard_network(monkeypatch)
    sock = short_dir / "egress.sock"
    workspace = owned(tmp_path / "work")
    egress = EgressSettings(
        nats_url=nats_url, egress_allow_ranges="127.0.0.0/8", egress_listen=f"unix:{sock}"
    )
    sandbox = SandboxSettings(
        nats_url=nats_url, state_dir=str(tmp_path / "st"), egress_socket=str(sock)
    )
    async with (
        pypi_server() as (port, seen),
        run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "vault"))),
        run_service(egress_service(RESOLVER), egress),
        run_service(sandbox_service, sandbox),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=nats_url)),
        run_service(policy_service, PolicySettings),
    ):
        skills_dir = write_skill(tmp_path / "skills", port)
        await add(client, "PYPI_TOKEN", TOKEN.encode())
        info = await open_session(
            client,
            workspace=str(workspace),
            shell=True,
            network="declared",
            autonomy="L5",
            skills_dir=str(skills_dir),
        )
        sid = info.session_id
        read = await call(client, sid, "skill_read", name="pypi-version")
        ran = await call(
            client, sid, "skill_run",
            args=["requests"], name="pypi-version", script="scripts/latest.py",
        )  # fmt: skip
    assert isinstance(read, ToolOutput), read
    assert f"bastion-network: pypi.test:{port}" in read.text
    assert isinstance(ran, ToolOutput), ran
    text = ran.text
    assert text.startswith("exit status 0"), text
    assert "using [secret PYPI_TOKEN]\n" in text
    assert "requests 2.34.2\n" in text
    assert f"http://example.test:{port}/ -> HTTP Error 403: Forbidden" in text
    assert "http://169.254.169.254/latest/meta-data/ -> HTTP Error 403: Forbidden" in text
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("connections: "), text
    assert f"pypi.test:{port} allowed" in last
    assert f"example.test:{port} refused: not a declared host" in last
    assert "169.254.169.254:80 refused: " in last
    assert TOKEN not in text and TOKEN[:20] not in text
    assert seen == ["GET /pypi/requests/json HTTP/1.1"]  # only the declared host was reached
    assert off_loopback == []
