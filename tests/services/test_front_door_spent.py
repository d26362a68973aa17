"""A session's read stream (`bastion.mcp.frontdoor.spent`): what it handed out is emptied
once the next item is asked for — a message of its body, an exception of its tracebacks."""

from __future__ import annotations

import anyio
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest

from bastion.mcp.frontdoor.spent import SPENT, Spending


def _failed() -> Exception:
    body = b"x" * 1024  # a frame's local, as the transport's reading the POST held

    def handling() -> None:
        raise ValueError(len(body))

    try:
        handling()
    except ValueError as error:
        try:
            raise RuntimeError("handling the POST") from error
        except RuntimeError as outer:
            return Exception(outer)
    raise AssertionError("unreachable")


def test_each_item_is_emptied_once_the_next_is_asked_for() -> None:
    message = SessionMessage(
        JSONRPCRequest(jsonrpc="2.0", id=1, method="ping", params={"x": [1]}), metadata=None
    )
    failed = _failed()
    inner = failed.args[0]

    async def read() -> list[object]:
        into, out = create_context_streams[SessionMessage | Exception](3)
        seen: list[object] = []
        async with into:
            for item in (message, failed, message):
                await into.send(item)
        async with Spending(out) as spending:
            seen.append(await spending.receive())
            seen.append(message.message)
            seen.append(await spending.receive())
            seen.append(message.message)
            seen.append((inner.__traceback__, inner.__cause__.__traceback__))
            await spending.receive()
        seen.append((inner.__traceback__, inner.__cause__.__traceback__))
        return seen

    seen = anyio.run(read)
    assert seen[0] is message and seen[1] is not SPENT
    assert seen[2] is failed and seen[3] is SPENT
    assert all(traceback is not None for traceback in seen[4])  # type: ignore[union-attr]
    assert seen[5] == (None, None)
