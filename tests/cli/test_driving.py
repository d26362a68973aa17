"""`bastion agent run`'s calls: one that got no answer is sent again with the same call_id."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest
from nats.aio.msg import Msg

from bastion.cli import driving
from bastion.cli.driving import _call
from bastion.cli.script import Step
from bastion.proto import subjects
from bastion.proto.errors import ErrorReply
from bastion.proto.policy import PolicyDecision
from bastion.proto.session import SessionInfo
from bastion.proto.tools import ToolCall, ToolOutput
from bastion.shared.bus import Client
from bastion.shared.codec import decode, encode

SESSION = SessionInfo(
    session_id="0123456789abcdef", tenant="default", agent="t", autonomy="L3", workspace=None,
    shell=False, sandbox="bwrap", network="none", state="open", opened_at=datetime.now(UTC),
)  # fmt: skip


async def _answering(client: Client, answers: list[object], seen: list[ToolCall]) -> None:
    async def answer(msg: Msg) -> None:
        seen.append(decode(msg.data, ToolCall))
        await msg.respond(encode(answers[len(seen) - 1]))

    await client.subscribe(subjects.session_call(SESSION.session_id), cb=answer)


async def test_a_call_that_got_no_answer_is_sent_again_with_the_same_call_id(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driving, "RETRY_PAUSE_S", 0.0)  # the pause is only for restarts
    seen: list[ToolCall] = []
    unavailable = ErrorReply(code="unavailable", message="no orchestrator answered")
    allowed = PolicyDecision(outcome="allow", reason="reads run at L3", rule="level.L3.read")
    done = ToolOutput(
        call_id="x", tool="read_file", effect="read", text="hi", decision=allowed, duration_s=0
    )
    await _answering(client, [unavailable, done], seen)
    with anyio.fail_after(10):
        result = await _call(client, SESSION, Step(tool="read_file", input={"path": "a"}))
    assert isinstance(result, ToolOutput) and result.text == "hi"
    assert len(seen) == 2 and seen[0].call_id and seen[0].call_id == seen[1].call_id


async def test_a_refusal_is_not_sent_again(client: Client) -> None:
    seen: list[ToolCall] = []
    denied = ErrorReply(code="denied", message="refused: no")
    await _answering(client, [denied, denied], seen)
    with anyio.fail_after(10):
        result = await _call(client, SESSION, Step(tool="read_file", input={"path": "a"}))
    assert isinstance(result, ErrorReply) and result.code == "denied" and len(seen) == 1
