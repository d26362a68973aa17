"""A server that misbehaves ends its connection, never the gateway: each call caught in it
is uncertain (`UpstreamNoAnswer`) with a sentence, and the server's process is gone."""

from __future__ import annotations

import json
import os
import resource
import uuid
from pathlib import Path

import anyio
import pytest
from mcp import types
from mcp.shared.message import SessionMessage

from bastion.mcp.gateway.upstream import (
    Upstream,
    UpstreamHandlers,
    UpstreamLimits,
    UpstreamNoAnswer,
    UpstreamRefused,
    UpstreamUnreachable,
    asks_for_secret,
    open_upstream,
)
from bastion.mcp.gateway.upstream.launch import Launch
from bastion.mcp.gateway.upstream.link import Link
from bastion.mcp.gateway.upstream.stdio import stdio_streams
from bastion.proto.mcp import ElicitAnswer, ElicitQuestion, McpServerSpec
from tests.helpers.mcp_upstream import PYTHON, SERVERS, stdio_spec
from tests.helpers.owners import owned

MISBEHAVING = SERVERS / "misbehaving.py"
SESSION = "0123456789abcdef"


def _text(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def _pid(upstream: Upstream) -> int:
    return int(_text(await upstream.call_tool("pid", {}, timeout_s=10)))


async def _no_answer(tmp_path: Path, tool: str, timeout_s: float = 10) -> tuple[str, int]:
    """Call `tool`, which gets no answer: the sentence, and the server's pid."""
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        pid = await _pid(bad)
        with pytest.raises(UpstreamNoAnswer) as no_answer:
            await bad.call_tool(tool, {}, timeout_s=timeout_s)
        assert not bad.alive
        with pytest.raises(UpstreamUnreachable, match="is no longer connected"):
            await bad.list_tools()
    assert no_answer.value.code == "uncertain"
    return no_answer.value.message, pid


async def _still_connects(tmp_path: Path) -> None:
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        assert len(await bad.list_tools()) > 5


async def test_an_answer_over_the_size_limit_ends_the_connection_not_the_gateway(
    tmp_path: Path,
) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with anyio.fail_after(30):
        message, pid = await _no_answer(tmp_path, "huge")
        await _still_connects(tmp_path)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert message == (
        "the MCP server bad sent a message over 4194304 bytes before answering huge: the call "
        "may or may not have taken effect"
    )
    assert _gone(pid)
    assert grown_kib < 64 * 1024


async def test_a_line_that_is_not_json_rpc_ends_the_connection(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        message, pid = await _no_answer(tmp_path, "garbage")
        await _still_connects(tmp_path)
    assert message.startswith(
        "the MCP server bad sent a line that is not JSON-RPC before answering garbage: "
    )
    assert _gone(pid)


async def test_a_server_that_dies_mid_call_leaves_the_call_uncertain(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        message, pid = await _no_answer(tmp_path, "die")
    assert message.startswith("the MCP server bad stopped (exit status 3) before answering die: ")
    assert _gone(pid)


async def test_a_server_that_stops_reading_breaks_the_link_at_the_next_write() -> None:
    """A write the server's input refuses breaks the link with how the server ended (still
    running: its output is taken for closed), that send and every later one raises, and
    the server is killed."""
    link = Link()
    ready = '{"jsonrpc": "2.0", "method": "notifications/ready"}'
    launch = Launch(
        argv=["sh", "-c", f"exec 0<&-; echo '{ready}'; exec sleep 60"],
        env={"PATH": "/usr/bin:/bin"},
        cwd=None,
    )
    notice = SessionMessage(types.JSONRPCNotification(jsonrpc="2.0", method="notifications/x"))
    with anyio.fail_after(30):
        async with stdio_streams(launch, UpstreamLimits(), link) as (read, write):
            assert isinstance(await read.receive(), SessionMessage)  # its input is closed now
            with pytest.raises(anyio.BrokenResourceError):
                await write.send(notice)
            assert link.reason == "closed its output"
            with pytest.raises(anyio.BrokenResourceError):
                await write.send(notice)
            with pytest.raises(anyio.EndOfStream):
                await read.receive()  # killed: its output ends


async def test_a_call_past_its_timeout_is_uncertain_and_the_server_is_killed(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        message, pid = await _no_answer(tmp_path, "sleep", timeout_s=0.5)
    assert message == (
        "the MCP server bad did not answer sleep within 0.5 s: the call may or may not have "
        "taken effect"
    )
    assert _gone(pid)


def _processes_naming(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_a_sandboxed_server_past_its_timeout_is_killed_with_its_sandbox(
    tmp_path: Path,
) -> None:
    tag = f"--tag={uuid.uuid4().hex}"
    spec = stdio_spec(MISBEHAVING, owned(tmp_path), tag, sandbox="bwrap")
    with anyio.fail_after(30):
        async with open_upstream(spec, server="bad", values={}) as bad:
            assert len(_processes_naming(tag)) >= 2  # bwrap and the server in it
            with pytest.raises(UpstreamNoAnswer, match=r"did not answer sleep within 0\.5 s"):
                await bad.call_tool("sleep", {}, timeout_s=0.5)
            while True:
                if not _processes_naming(tag):
                    break
                await anyio.sleep(0.05)  # polling for the kill to land, bounded above


@pytest.mark.parametrize(
    ("sandbox", "ending"),
    [
        ("none", "check that it runs by itself and speaks MCP on its standard output"),
        (
            "bwrap",
            "; in its sandbox it sees only the system, its --dir and what --sandbox-read "
            "shows: a program from a virtual environment needs that environment and the "
            "Python it was made from shown (--sandbox-read for each)",
        ),
    ],
)
async def test_a_server_that_exits_at_once_is_unreachable_with_what_to_check(
    tmp_path: Path, sandbox: str, ending: str
) -> None:
    spec = McpServerSpec(
        transport="stdio",
        command=(PYTHON, "-c", "raise SystemExit(2)"),
        directory=str(owned(tmp_path)),
        sandbox=sandbox,
    )
    with pytest.raises(UpstreamUnreachable) as unreachable:
        async with open_upstream(spec, server="quick", values={}):
            pass
    message = unreachable.value.message
    assert message.startswith(
        f"the MCP server quick (`{PYTHON} -c 'raise SystemExit(2)'`) stopped (exit status "
    )
    assert "before its handshake was done: check that it runs by itself and speaks MCP" in message
    assert message.endswith(ending)
    if sandbox == "none":
        assert "(exit status 2)" in message


async def test_a_listing_is_cut_at_the_limit(tmp_path: Path) -> None:
    limits = UpstreamLimits(max_tools=3)
    spec = stdio_spec(MISBEHAVING, tmp_path)
    async with open_upstream(spec, server="bad", values={}, limits=limits) as bad:
        assert len(await bad.list_tools()) == 3


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_only_the_variables_named_reach_the_server(
    tmp_path: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BASTION_TEST_LEAK", "not for the server")
    spec = stdio_spec(MISBEHAVING, owned(tmp_path), sandbox=sandbox, env=("GIVEN", "UNSET"))
    values = {"GIVEN": "yes", "OTHER": "not named"}
    async with open_upstream(spec, server="bad", values=values) as bad:
        environ = json.loads(_text(await bad.call_tool("environ", {}, timeout_s=10)))
    allowed = {"PATH", "HOME", "LANG", "TMPDIR", "GIVEN", "LC_CTYPE"}
    if sandbox == "bwrap":
        # As in the shell's sandbox: bwrap's own TERM and PWD (its --chdir), nothing else.
        allowed |= {"TERM", "PWD"}
        assert environ["HOME"] == environ["PWD"] == "/workspace"
    assert environ["GIVEN"] == "yes"
    assert set(environ) <= allowed


async def test_what_a_server_writes_to_standard_error_is_discarded(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async with open_upstream(stdio_spec(MISBEHAVING, tmp_path), server="bad", values={}) as bad:
        result = await bad.call_tool("noisy", {}, timeout_s=10)
    assert _text(result) == "said something on stderr"
    captured = capfd.readouterr()
    assert "hunter2" not in captured.err + captured.out


async def test_a_password_form_is_declined_unasked_and_another_question_is_relayed(
    tmp_path: Path,
) -> None:
    asked: list[ElicitQuestion] = []

    async def elicit(question: ElicitQuestion) -> ElicitAnswer:
        asked.append(question)
        return ElicitAnswer(action="accept", content={"colour": "teal"})

    handlers = UpstreamHandlers(elicit=elicit, session_id=SESSION)
    spec = stdio_spec(MISBEHAVING, tmp_path)
    async with open_upstream(
        spec, server="bad", values={}, handlers=handlers, prefer_protocol="2025-11-25"
    ) as bad:
        password = await bad.call_tool("ask_password", {}, timeout_s=10)
        colour = await bad.call_tool("ask_colour", {}, timeout_s=10)
    assert _text(password) == "password: decline"
    assert _text(colour) == "colour: accept teal"
    assert [(q.session_id, q.server, q.message) for q in asked] == [
        (SESSION, "bad", "Your favourite colour?")
    ]
    assert "colour" in json.loads(asked[0].schema_json)["properties"]


async def test_at_most_five_questions_of_a_call_are_relayed(tmp_path: Path) -> None:
    asked: list[str] = []

    async def elicit(question: ElicitQuestion) -> ElicitAnswer:
        asked.append(question.message)
        return ElicitAnswer(action="accept", content={"colour": "red"})

    handlers = UpstreamHandlers(elicit=elicit, session_id=SESSION)
    spec = stdio_spec(MISBEHAVING, tmp_path)
    async with open_upstream(
        spec, server="bad", values={}, handlers=handlers, prefer_protocol="2025-11-25"
    ) as bad:
        many = await bad.call_tool("ask_many", {}, timeout_s=10)
        again = await bad.call_tool("ask_colour", {}, timeout_s=10)
    assert _text(many) == "accept accept accept accept accept decline decline"
    assert _text(again) == "colour: accept red"
    assert len(asked) == 6


async def test_an_answer_the_protocol_cannot_carry_is_sent_on_as_a_decline(
    tmp_path: Path,
) -> None:
    async def elicit(_question: ElicitQuestion) -> ElicitAnswer:
        return ElicitAnswer(action="accept", content={"colour": {"nested": ["object"]}})

    handlers = UpstreamHandlers(elicit=elicit, session_id=SESSION)
    spec = stdio_spec(MISBEHAVING, tmp_path)
    async with open_upstream(
        spec, server="bad", values={}, handlers=handlers, prefer_protocol="2025-11-25"
    ) as bad:
        colour = await bad.call_tool("ask_colour", {}, timeout_s=10)
        assert bad.alive
    assert _text(colour) == "colour: decline"


async def test_with_no_one_to_ask_the_server_is_not_offered_elicitation(tmp_path: Path) -> None:
    spec = stdio_spec(MISBEHAVING, tmp_path)
    async with open_upstream(spec, server="bad", values={}, prefer_protocol="2025-11-25") as bad:
        declared = await bad.call_tool("capabilities", {}, timeout_s=10)
        with pytest.raises(UpstreamRefused) as asked_anyway:
            await bad.call_tool("ask_colour", {}, timeout_s=10)
    assert _text(declared).startswith("elicitation no,")
    assert "Elicitation not supported" in asked_anyway.value.message


async def test_sampling_is_relayed_to_its_handler_and_refused_without_one(
    tmp_path: Path,
) -> None:
    prompts: list[str] = []

    async def sample(params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        first = params.messages[0].content
        prompts.append(first.text if isinstance(first, types.TextContent) else "")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="hi"), model="test"
        )

    spec = stdio_spec(MISBEHAVING, tmp_path)
    async with open_upstream(
        spec,
        server="bad",
        values={},
        handlers=UpstreamHandlers(sample=sample),
        prefer_protocol="2025-11-25",
    ) as bad:
        relayed = await bad.call_tool("sample", {}, timeout_s=10)
    async with open_upstream(spec, server="bad", values={}, prefer_protocol="2025-11-25") as bad:
        refused = await bad.call_tool("sample", {}, timeout_s=10)
    assert _text(relayed) == "model said: hi"
    assert prompts == ["Say hi"]
    assert _text(refused).startswith("refused: ")


@pytest.mark.parametrize(
    "field",
    [
        ("password", {"type": "string"}),
        ("apiKey", {"type": "string"}),
        ("github_token", {"type": "string"}),
        ("code", {"type": "string", "description": "The card number on the front"}),
        ("answer", {"type": "string", "format": "password"}),
        ("value", {"type": "string", "title": "Client secret"}),
    ],
)
def test_a_form_asking_for_a_secret_is_recognised(field: tuple[str, dict[str, str]]) -> None:
    name, schema = field
    assert asks_for_secret({"type": "object", "properties": {name: schema}})


def test_a_form_asking_for_ordinary_things_is_not_taken_for_a_secret() -> None:
    schema = {
        "type": "object",
        "properties": {
            "colour": {"type": "string", "description": "Your favourite colour"},
            "keyword": {"type": "string"},
            "count": {"type": "integer", "title": "How many"},
        },
    }
    assert not asks_for_secret(schema)
