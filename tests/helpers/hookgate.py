"""A hook service that holds calls at their before-tool hook until the test lets them go,
and logs each call's way in (before the tool) and out (after it): a test shows calls of a
session overlapping, or not, by counting what is inside at once, never by timing.
Calls are told apart by their input's `path`."""

from __future__ import annotations

import secrets

import anyio
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from bastion.orchestrator.hooks import Hooks
from bastion.proto import subjects
from bastion.proto.hooks import HookAnswer, HookEvent, HookRegistration
from bastion.proto.tools import CallResult, ToolCall
from bastion.shared.bus import Client, round_trip
from bastion.shared.codec import decode, encode

__all__ = ["HookGate", "Sent", "send"]


class HookGate:
    """Holds every before-tool call until `release`; `log` has ("in"|"out", path) in the
    order the hook was told, `most_inside` the most calls in at once."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.inside = 0
        self.most_inside = 0
        self._held: list[Msg] = []
        self._holding = True
        self._more = anyio.Event()

    @property
    def held(self) -> int:
        return len(self._held)

    async def register(self, client: Client, name: str = "gate") -> None:
        """Answer the hook's subjects and register it (before the orchestrator starts, so
        its first look at the bucket finds it)."""
        await client.subscribe(f"{subjects.PREFIX}.hooks.*.*.{name}", cb=self._told)
        await round_trip(client)
        await Hooks.open(client, subjects.HOOKS_BUCKET)  # the bucket, created if missing
        kv = await client.jetstream().key_value(subjects.HOOKS_BUCKET)
        registration = HookRegistration(
            name=name, events=("before_tool", "after_tool"), timeout_s=60
        )
        await kv.put(name, encode(registration))

    async def _told(self, msg: Msg) -> None:
        event = decode(msg.data, HookEvent)
        path = str(event.input.get("path", ""))
        if event.event == "before_tool":
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self.log.append(("in", path))
            if self._holding:
                self._held.append(msg)
                self._more.set()
                return
        else:
            self.inside -= 1
            self.log.append(("out", path))
        await msg.respond(encode(HookAnswer()))

    async def until_held(self, count: int) -> None:
        """Wait until `count` calls are held (the caller bounds the wait)."""
        while len(self._held) < count:
            self._more = anyio.Event()
            await self._more.wait()

    async def release(self) -> None:
        """Let every held call go, and every later one through at once."""
        self._holding = False
        held, self._held = self._held, []
        for msg in held:
            await msg.respond(encode(HookAnswer()))

    def position(self, way: str, path: str) -> int:
        return self.log.index((way, path))


class Sent:
    """A call sent, its answer still to come."""

    def __init__(self, inbox: Subscription) -> None:
        self._inbox = inbox

    async def answer(self) -> CallResult:
        msg = await self._inbox.next_msg(timeout=60)
        result: CallResult = decode(msg.data, CallResult)
        return result


async def send(
    client: Client, session_id: str, tool: str, call_id: str | None = None, **tool_input: object
) -> Sent:
    """Send a call and flush, so that calls sent one after another reach the orchestrator
    in that order; its answer is read later."""
    inbox = f"_INBOX.{secrets.token_hex(8)}"
    subscription = await client.subscribe(inbox, max_msgs=1)
    call = ToolCall(tool=tool, input=dict(tool_input), call_id=call_id)
    await client.publish(subjects.session_call(session_id), encode(call), reply=inbox)
    await round_trip(client)
    return Sent(subscription)
