"""mcp registers and answers `mcp.call` with a typed `not_implemented` until issue 6."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from bastion.mcp.service import McpSettings
from bastion.mcp.service import setup as mcp_setup
from bastion.policy.service import policy_service
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.mcp import McpCall
from bastion.shared.bus import Client, request
from bastion.shared.codec import decode
from bastion.shared.discovery import list_instances
from bastion.shared.errors import RemoteError
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings
from tests.conftest import ServiceRunner, raw_request

SESSION = "0123456789abcdef"


def mcp_on_any_port(client: Client, settings: BusSettings) -> AbstractAsyncContextManager[Service]:
    """The mcp service with its front door on a port the system picks (none is asked here)."""
    return mcp_setup(client, McpSettings(nats_url=settings.nats_url, http_listen="127.0.0.1:0"))


PLACEHOLDERS: list[tuple[str, Any, str, object, int]] = [
    (
        "mcp",
        mcp_on_any_port,
        subjects.MCP_CALL,
        McpCall(tenant="default", session_id=SESSION, call_id="c1", server="notes", tool="list"),
        6,
    ),
]


@pytest.mark.parametrize(("name", "setup", "subject", "message", "issue"), PLACEHOLDERS)
async def test_a_placeholder_registers_and_answers_not_implemented_naming_its_issue(
    client: Client,
    run_service: ServiceRunner,
    name: str,
    setup: Any,
    subject: str,
    message: object,
    issue: int,
) -> None:
    async with run_service(setup):
        instances = await list_instances(client)
        with pytest.raises(RemoteError) as refused:
            await request(client, subject, message, ErrorReply, timeout_s=5)
    assert [i.name for i in instances] == [name]
    assert refused.value.code == "not_implemented"
    assert f"issue {issue}" in refused.value.message


@pytest.mark.parametrize(
    ("setup", "subject"),
    [(p[1], p[2]) for p in PLACEHOLDERS] + [(policy_service, subjects.POLICY_DECIDE)],
)
async def test_a_message_of_the_wrong_shape_gets_bad_request_not_silence(
    client: Client, run_service: ServiceRunner, setup: Any, subject: str
) -> None:
    async with run_service(setup):
        for payload in (b"", b"\xc1", b"\x81\xa4kind\xa4nope"):
            reply = await raw_request(client, subject, payload)
            error = decode(reply.data, ErrorReply)
            assert error.code == "bad_request"
            assert reply.headers is not None and reply.headers["Nats-Service-Error-Code"] == "400"
