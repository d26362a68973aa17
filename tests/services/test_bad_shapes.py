"""A request of the wrong shape gets a typed `bad_request`, never silence, from any service."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from bastion.mcp.service import mcp_service
from bastion.mcp.settings import McpSettings
from bastion.policy.service import policy_service
from bastion.policy.settings import PolicySettings
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.shared.bus import Client
from bastion.shared.codec import decode
from bastion.shared.service import Service
from bastion.shared.settings import BusSettings
from tests.helpers.bus import ServiceRunner, raw_request


def mcp_on_any_port(client: Client, settings: BusSettings) -> AbstractAsyncContextManager[Service]:
    """The mcp service with its front door on a port the system picks (none is asked here)."""
    return mcp_service(client, McpSettings(nats_url=settings.nats_url, http_listen="127.0.0.1:0"))


@pytest.mark.parametrize(
    ("setup", "settings", "subject"),
    [
        (mcp_on_any_port, None, subjects.MCP_CALL),
        (mcp_on_any_port, None, subjects.MCP_ADD),
        (policy_service, PolicySettings, subjects.POLICY_DECIDE),
    ],
)
async def test_a_message_of_the_wrong_shape_gets_bad_request_not_silence(
    client: Client, run_service: ServiceRunner, setup: Any, settings: Any, subject: str
) -> None:
    async with run_service(setup, settings):
        for payload in (b"", b"\xc1", b"\x81\xa4kind\xa4nope"):
            reply = await raw_request(client, subject, payload)
            error = decode(reply.data, ErrorReply)
            assert error.code == "bad_request"
            assert reply.headers is not None and reply.headers["Nats-Service-Error-Code"] == "400"
