"""A leased secret reaches its one command and nothing else: not the bus, logs, spans, the
audit, replies or errors, nor a later session of its tenant that finds it in the workspace."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from bastion.proto import subjects
from bastion.proto.sandbox import EditFile, ExecRequest, ExecResult, FileResult, ReadFile
from bastion.proto.toolinput import EditFileInput, ReadFileInput
from bastion.sandbox.service import sandbox_service
from bastion.sandbox.settings import SandboxSettings
from bastion.shared.bus import Client, connect, request, round_trip
from bastion.shared.errors import RemoteError
from bastion.shared.redaction import forms
from bastion.shared.settings import BusSettings
from bastion.vault.service import vault_service
from tests.helpers.bus import ServiceRunner
from tests.helpers.tracing import Spans, span_ancestry
from tests.helpers.vault import SESSION, add, key_file, vault_settings

NAME = "LEAK_TOKEN"
LATER = "fedcba9876543210"

PRINTS_IT_EVERY_WAY = """
echo "raw: $LEAK_TOKEN"
printf 'b64: '; printf %s "$LEAK_TOKEN" | base64 -w0; echo
printf 'b64 mid-blob: '; (printf 'xy'; printf %s "$LEAK_TOKEN"; printf 'tail') | base64 -w0; echo
printf 'b64 offset 1: '; (printf 'q'; printf %s "$LEAK_TOKEN"; printf 'z') | base64 -w0; echo
printf 'hex: '; printf %s "$LEAK_TOKEN" | od -An -tx1 | tr -d ' \\n'; echo
printf 'HEX: '; printf %s "$LEAK_TOKEN" | od -An -tx1 | tr -d ' \\n' | tr a-f A-F; echo
echo 'split:'; printf %s "$LEAK_TOKEN" | fold -w 7; echo
echo "to stderr: $LEAK_TOKEN" >&2
printf %s "$LEAK_TOKEN" > leak.txt
printf 'api_key = %s\nend\n' "$LEAK_TOKEN" > config.txt
"""


@pytest.fixture
def value() -> str:
    return "tok-" + secrets.token_urlsafe(24)


@pytest.fixture
def everything(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


def visible(value: str) -> list[bytes]:
    """The value and its longer forms: any of them in a message or log is a leak."""
    return [form.encode() for form in forms(value) if len(form) >= 12]


async def test_a_leased_secret_appears_nowhere_but_in_its_command(
    client: Client,
    run_service: ServiceRunner,
    bus_settings: BusSettings,
    nats_url: str,
    tmp_path: Path,
    workspace: Path,
    value: str,
    everything: pytest.LogCaptureFixture,
    spans: Spans,
) -> None:
    seen: list[Msg] = []

    async def record(msg: Msg) -> None:
        seen.append(msg)

    sandbox_settings = SandboxSettings(nats_url=nats_url, state_dir=str(tmp_path / "state"))
    async with (
        connect(bus_settings, "recorder") as recorder,
        run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "vault"))),
        run_service(sandbox_service, sandbox_settings),
    ):
        await recorder.subscribe(">", cb=record)
        await recorder.subscribe("$JS.>", cb=record)  # in case `>` leaves `$` subjects out
        await round_trip(recorder)
        await add(client, NAME, value.encode())
        result: ExecResult = await request(
            client,
            subjects.SANDBOX_EXEC,
            ExecRequest(
                session_id=SESSION, workspace=str(workspace), command=PRINTS_IT_EVERY_WAY,
                call_id="call-1", secrets=(NAME,),
            ),
            ExecResult, timeout_s=30,
        )  # fmt: skip
        read: FileResult = await request(
            client,
            subjects.SANDBOX_FILES,
            ReadFile(
                session_id=SESSION, workspace=str(workspace), input=ReadFileInput(path="leak.txt")
            ),
            FileResult, timeout_s=10,
        )  # fmt: skip
        with pytest.raises(RemoteError) as missed:  # its error quotes the file's nearest lines
            await request(
                client,
                subjects.SANDBOX_FILES,
                EditFile(
                    session_id=SESSION, workspace=str(workspace),
                    input=EditFileInput(
                        path="config.txt", old_string="api_key = another\nend", new_string="x"
                    ),
                ),
                FileResult, timeout_s=10,
            )  # fmt: skip
        later: ExecResult = await request(
            client,
            subjects.SANDBOX_EXEC,
            ExecRequest(
                session_id=LATER, workspace=str(workspace),
                command="cat leak.txt; echo; base64 -w0 config.txt",
            ),
            ExecResult, timeout_s=30,
        )  # fmt: skip
        audit = await audit_messages(client)
        await recorder.flush()

    assert result.exit_status == 0, result.stderr
    lines = result.stdout.splitlines()
    for label in ("raw", "b64", "b64 mid-blob", "b64 offset 1", "hex", "HEX"):
        line = next(line for line in lines if line.startswith(f"{label}: "))
        assert f"[secret {NAME}]" in line, line
    assert f"split:\n[secret {NAME}]" in result.stdout
    assert result.stderr.strip() == f"to stderr: [secret {NAME}]"
    assert f"[secret {NAME}]" in read.text
    assert f"api_key = [secret {NAME}]" in missed.value.message
    assert later.stdout.startswith(f"[secret {NAME}]\n"), later.stdout  # never leased there
    assert len(audit) >= 2  # the lease and the later session's redaction set, read back

    leaks = visible(value)
    assert len(seen) > 10 and any(m.subject == subjects.SANDBOX_EXEC for m in seen)
    assert any(m.subject.startswith("$JS.") for m in seen)  # KV and stream traffic recorded
    for msg in seen:
        carried = msg.subject.encode() + msg.data + repr(msg.headers or {}).encode()
        assert not any(form in carried for form in leaks), msg.subject
    for data in audit:
        assert not any(form in data for form in leaks)
    shown = [missed.value.message, later.stdout, later.stderr, result.stdout, read.text]
    assert not any(form.decode() in text for form in leaks for text in shown)
    for log in everything.records:
        assert not any(form.decode() in repr(log.__dict__) for form in leaks)
    finished = spans.finished()
    assert finished
    for span in finished:
        text = repr(dict(span.attributes or {})) + repr([e.attributes for e in span.events])
        assert not any(form.decode() in text for form in leaks), span.name
    assert (workspace / "leak.txt").read_text() == value  # the command did have it
    [lease] = [s for s in finished if s.name == "process bastion.v1.vault.lease"]
    assert span_ancestry(finished, lease)[:2] == [
        "send bastion.v1.vault.lease",
        "process bastion.v1.sandbox.exec",
    ]


async def audit_messages(client: Client) -> list[bytes]:
    """Every record of the audit stream, as stored."""
    js = client.jetstream()
    info = await js.stream_info(subjects.AUDIT_STREAM)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        data = (await js.get_msg(subjects.AUDIT_STREAM, seq)).data
        assert data is not None
        found.append(data)
    return found


async def test_a_command_asking_for_another_tenants_secret_gets_a_refusal_and_no_run(
    client: Client, run_service: ServiceRunner, nats_url: str, tmp_path: Path, workspace: Path
) -> None:
    sandbox_settings = SandboxSettings(nats_url=nats_url, state_dir=str(tmp_path / "state"))
    async with (
        run_service(vault_service, vault_settings(nats_url, key_file(tmp_path / "vault"))),
        run_service(sandbox_service, sandbox_settings),
    ):
        await add(client, NAME, b"their-token-value", tenant="them")
        with pytest.raises(RemoteError) as refused:
            await request(
                client,
                subjects.SANDBOX_EXEC,
                ExecRequest(
                    session_id=SESSION, workspace=str(workspace), command="touch ran",
                    tenant="us", secrets=(NAME,),
                ),
                ExecResult, timeout_s=30,
            )  # fmt: skip
    assert refused.value.code == "not_found" and not (workspace / "ran").exists()
