"""Both ways at once: an outside agent at the front door calls an upstream server's tools,
and the upstream's questions (elicitation) and completions (sampling) reach that agent's
client — a form asking for a secret never does, and sampling only within its allowance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from mcp_types import CreateMessageRequestParams, CreateMessageResult, TextContent

from bastion.proto import subjects
from bastion.proto.mcp import AddServer, EffectOverride, McpReview, SamplingAllowance
from bastion.proto.tools import ToolOutput
from bastion.shared.bus import Client as Bus
from bastion.shared.bus import request
from tests.helpers.bus import Plane
from tests.helpers.front_door import Asked, DoorOf, mcp_client, new_token, text_of
from tests.helpers.mcp_upstream import SERVERS, apart, stdio_spec
from tests.helpers.session import call, open_session


class Model:
    """A sampling callback standing for the client's model; what it was asked is kept."""

    def __init__(self) -> None:
        self.asked: list[CreateMessageRequestParams] = []

    async def __call__(
        self, _context: Any, params: CreateMessageRequestParams
    ) -> CreateMessageResult:
        self.asked.append(params)
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="hi"), model="scripted"
        )


async def add_bad(
    bus: Bus, directory: Path, sampling: SamplingAllowance | None, name: str = "bad"
) -> None:
    spec = msgspec.structs.replace(
        stdio_spec(SERVERS / "misbehaving.py", directory, "--legacy"),
        sampling=sampling,
        # Taken as a read (not journaled), so that the same call can be made twice.
        effects=(EffectOverride(tool="sample", effect="read"),),
    )
    await request(bus, subjects.MCP_ADD, AddServer(name=name, spec=spec), McpReview, timeout_s=60)


async def test_an_upstream_question_reaches_the_agent_but_a_secret_form_never_does(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path
) -> None:
    person = Asked({"colour": "blue"})
    async with plane_of(), door_of() as url:
        await add_bad(client, apart(tmp_path), sampling=None)
        token = await new_token(client, workspace, autonomy="L5", mcp=["bad"])
        async with mcp_client(url, token, elicit=person) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
            colour = await mcp.call_tool("bad_ask_colour", {})
            password = await mcp.call_tool("bad_ask_password", {})
    assert {"bad_ask_colour", "bad_ask_password", "bad_resources"} <= names
    assert text_of(colour) == "colour: accept blue"
    assert text_of(password).startswith("password: decline")
    assert len(person.messages) == 1 and "bad" in person.messages[0]


async def test_sampling_is_refused_unless_allowed_and_then_capped(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path
) -> None:
    model = Model()
    async with plane_of(), door_of() as url:
        await add_bad(
            client, apart(tmp_path), sampling=SamplingAllowance(max_tokens=5, per_session=1)
        )
        token = await new_token(client, workspace, autonomy="L5", mcp=["bad"])
        async with mcp_client(url, token, sample=model) as mcp:
            first = await mcp.call_tool("bad_sample", {})
            second = await mcp.call_tool("bad_sample", {})
    assert text_of(first) == "model said: hi"
    assert text_of(second).startswith("refused: MCP server bad has had its 1 completions")
    [asked] = model.asked
    assert asked.max_tokens == 5


async def test_sampling_is_off_for_a_server_not_allowed_it(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path
) -> None:
    model = Model()
    async with plane_of(), door_of() as url:
        await add_bad(client, apart(tmp_path), sampling=None)
        token = await new_token(client, workspace, autonomy="L5", mcp=["bad"])
        async with mcp_client(url, token, sample=model) as mcp:
            refused = await mcp.call_tool("bad_sample", {})
    assert text_of(refused).startswith("refused:")
    assert model.asked == []


async def test_each_server_has_its_own_sampling_allowance_in_a_session(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path
) -> None:
    model = Model()
    allowance = SamplingAllowance(max_tokens=5, per_session=1)
    async with plane_of(), door_of() as url:
        await add_bad(client, apart(tmp_path), sampling=allowance)
        await add_bad(client, apart(tmp_path), sampling=allowance, name="odd")
        token = await new_token(client, workspace, autonomy="L5", mcp=["bad", "odd"])
        async with mcp_client(url, token, sample=model) as mcp:
            bad = await mcp.call_tool("bad_sample", {})
            odd = await mcp.call_tool("odd_sample", {})
            bad_again = await mcp.call_tool("bad_sample", {})
    assert text_of(bad) == "model said: hi"
    assert text_of(odd) == "model said: hi"  # bad's completion is not odd's
    assert text_of(bad_again).startswith("refused: MCP server bad has had its 1 completions")
    assert len(model.asked) == 2


async def test_elicitation_is_declared_to_an_upstream_only_when_a_client_can_answer(
    client: Bus, plane_of: Plane, door_of: DoorOf, workspace: Path, tmp_path: Path
) -> None:
    async with plane_of(), door_of() as url:
        await add_bad(
            client, apart(tmp_path), sampling=SamplingAllowance(max_tokens=5, per_session=1)
        )
        token = await new_token(client, workspace, autonomy="L5", mcp=["bad"])
        async with mcp_client(url, token, elicit=Asked({"colour": "blue"})) as mcp:
            answering = await mcp.call_tool("bad_capabilities", {})
        async with mcp_client(url, token) as mcp:
            silent = await mcp.call_tool("bad_capabilities", {})
        # A session on the bus (`agent run`): no client of its own to put a question to.
        bus_session = await open_session(
            client, workspace=str(workspace), autonomy="L5", mcp=["bad"]
        )
        scripted = await call(client, bus_session.session_id, "bad_capabilities")
    assert text_of(answering).startswith("elicitation yes,")
    assert text_of(silent).startswith("elicitation no,")
    assert isinstance(scripted, ToolOutput), scripted
    assert scripted.text.startswith("elicitation no,")
