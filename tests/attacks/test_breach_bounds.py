"""Bounds one caller cannot push past to hurt another: nesting, searches, sessions, CPU, disk.

Each test makes the attack through the bus, as a caller would, and asserts the bound held
with a typed answer that says what to do.
"""

from __future__ import annotations

import pytest

from bastion.mcp.service import McpSettings
from bastion.mcp.service import setup as mcp_setup
from bastion.orchestrator.service import OrchestratorSettings, orchestrator_service
from bastion.proto import errors as codes
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.shared.bus import Client
from bastion.shared.codec import MAX_NESTING, decode, encode
from bastion.shared.settings import BusSettings
from tests.conftest import ServiceRunner, raw_request

# --- input nested deeper than anything parses ------------------------------------------


def nested(depth: int, kind: str, **fields: object) -> bytes:
    """A message whose last value (a None at the end of the last field given) becomes an
    array nested `depth` deep: built as bytes, since no encoder makes one that deep."""
    shallow = encode({"kind": kind, **fields})
    assert shallow.endswith(b"\xc0")
    return shallow[:-1] + b"\x91" * depth + b"\xc0"


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 10_000])
async def test_input_nested_too_deep_is_a_bad_request_on_each_service(
    client: Client, run_service: ServiceRunner, bus_settings: BusSettings, depth: int
) -> None:
    cases = [
        (
            orchestrator_service,
            OrchestratorSettings(nats_url=bus_settings.nats_url),
            subjects.session_call("0123456789abcdef"),
            nested(depth, "tool.call", tool="shell", input={"x": None}),
        ),
        (
            mcp_setup,
            McpSettings(nats_url=bus_settings.nats_url, http_listen="127.0.0.1:0"),
            subjects.MCP_CALL,
            nested(
                depth,
                "mcp.call",
                tenant="acme",
                session_id="0123456789abcdef",
                call_id="c1",
                server="s",
                arguments={"x": None},
            ),
        ),
    ]
    for setup, settings, subject, payload in cases:
        async with run_service(setup, settings):
            reply = await raw_request(client, subject, payload)
        error = decode(reply.data, ErrorReply)
        assert error.code == codes.BAD_REQUEST, (subject, error)
        assert f"nested more than {MAX_NESTING} deep" in error.message
